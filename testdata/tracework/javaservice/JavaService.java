// JavaService is the Java side of the polyglot trace example
// (test/trace TestThreeServicesPolyglot): an HTTP service on loopback
// (com.sun.net.httpserver) run under the OpenTelemetry Java agent, which
// makes its server span from the W3C traceparent header and the client
// span of its call to the next service (java.net.http.HttpClient). The
// service uses the OpenTelemetry API alone, for its inner spans of known
// work; it knows nothing of the profiler.
//
// For "GET /work?cpu_ms=N&sleep_ms=M&next=URL" it runs
//
//	java cpu      burns N ms of thread CPU time
//	java sleep    Thread.sleep(M)
//	java call     GET URL (the next service), when next is given
//
// and prints per span "truth TRACE_ID SPAN_ID NAME TID START_NS END_NS
// CPU_NS WAIT_NS RUN_NS": the native thread id, the wall-clock bounds of
// the work inside the span, the thread CPU time it took, the rest of its
// wall time (a wait), and the time it was current on a CPU (RUN_NS, the
// monotonic clock less the thread's run_delay in /proc/thread-self/schedstat;
// 0 for a wait, and 0 for a burst that blocked, at a safepoint say, where
// that clock would count the blocked time: its CPU_NS is then the truth).
// Prints "ready PID PORT" once listening.
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;

public class JavaService {
  static final ThreadMXBean mx = ManagementFactory.getThreadMXBean();
  static final HttpClient client = HttpClient.newHttpClient();
  static volatile long sink;

  static long wallNs() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000_000L + now.getNano();
  }

  // tid is the calling thread's native id, from the /proc/thread-self
  // link ("PID/task/TID").
  static long tid() throws IOException {
    String l = Files.readSymbolicLink(Path.of("/proc/thread-self")).toString();
    return Long.parseLong(l.substring(l.lastIndexOf('/') + 1));
  }

  // running is the monotonic clock less the time this thread waited
  // runnable: its difference over busy work is the time current on a CPU.
  static long running() throws IOException {
    String[] f = Files.readString(Path.of("/proc/thread-self/schedstat")).trim().split("\\s+");
    return System.nanoTime() - Long.parseLong(f[1]);
  }

  // voluntary is the thread's count of voluntary context switches.
  static long voluntary() throws IOException {
    for (String l : Files.readAllLines(Path.of("/proc/thread-self/status"))) {
      if (l.startsWith("voluntary_ctxt_switches:")) {
        return Long.parseLong(l.substring(l.indexOf(':') + 1).trim());
      }
    }
    throw new IOException("no voluntary_ctxt_switches in /proc/thread-self/status");
  }

  static void truth(Span s, String name, long tid, long start, long end, long cpu, long wait, long run) {
    String line = String.format("truth %s %s %s %d %d %d %d %d %d", s.getSpanContext().getTraceId(),
        s.getSpanContext().getSpanId(), name, tid, start, end, cpu, wait, run);
    synchronized (System.out) {
      System.out.println(line);
      System.out.flush();
    }
  }

  static void burn(long ns) {
    long start = mx.getCurrentThreadCpuTime();
    while (mx.getCurrentThreadCpuTime() - start < ns) {
      for (int i = 0; i < 20000; i++) {
        sink = sink * 6364136223846793005L + 1;
      }
    }
  }

  static Map<String, String> query(HttpExchange ex) {
    Map<String, String> q = new HashMap<>();
    String raw = ex.getRequestURI().getRawQuery();
    if (raw != null) {
      for (String kv : raw.split("&")) {
        int i = kv.indexOf('=');
        if (i > 0) {
          q.put(kv.substring(0, i), URLDecoder.decode(kv.substring(i + 1), StandardCharsets.UTF_8));
        }
      }
    }
    return q;
  }

  static void work(HttpExchange ex, Tracer tracer) throws Exception {
    Map<String, String> q = query(ex);
    long cpuMs = Long.parseLong(q.getOrDefault("cpu_ms", "0"));
    long sleepMs = Long.parseLong(q.getOrDefault("sleep_ms", "0"));
    String next = q.get("next");
    long tid = tid();

    Span s = tracer.spanBuilder("java cpu").startSpan();
    try (Scope sc = s.makeCurrent()) {
      long start = wallNs(), c0 = mx.getCurrentThreadCpuTime(), v0 = voluntary(), r0 = running();
      burn(cpuMs * 1_000_000L);
      long cpu = mx.getCurrentThreadCpuTime() - c0, run = running() - r0, end = wallNs();
      if (voluntary() != v0) {
        run = 0;
      }
      truth(s, "java-cpu", tid, start, end, cpu, 0, run);
    } finally {
      s.end();
    }

    s = tracer.spanBuilder("java sleep").startSpan();
    try (Scope sc = s.makeCurrent()) {
      long start = wallNs(), c0 = mx.getCurrentThreadCpuTime();
      Thread.sleep(sleepMs);
      long end = wallNs(), cpu = mx.getCurrentThreadCpuTime() - c0;
      truth(s, "java-sleep", tid, start, end, 0, end - start - cpu, 0);
    } finally {
      s.end();
    }

    if (next != null) {
      s = tracer.spanBuilder("java call").startSpan();
      try (Scope sc = s.makeCurrent()) {
        long start = wallNs(), c0 = mx.getCurrentThreadCpuTime();
        HttpResponse<String> resp = client.send(HttpRequest.newBuilder(URI.create(next)).GET().build(),
            HttpResponse.BodyHandlers.ofString());
        long end = wallNs(), cpu = mx.getCurrentThreadCpuTime() - c0;
        if (resp.statusCode() != 200) {
          throw new IOException("call " + next + ": " + resp.statusCode() + ": " + resp.body());
        }
        truth(s, "java-call", tid, start, end, cpu, end - start - cpu, 0);
      } finally {
        s.end();
      }
    }
  }

  public static void main(String[] args) throws Exception {
    Tracer tracer = GlobalOpenTelemetry.getTracer("javaservice");
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
    server.createContext("/work", ex -> {
      int code = 200;
      String body = "ok\n";
      try {
        work(ex, tracer);
      } catch (Throwable e) {
        code = 500;
        body = e.toString() + "\n";
        System.err.println("javaservice: " + e);
        e.printStackTrace();
      }
      byte[] b = body.getBytes(StandardCharsets.UTF_8);
      ex.sendResponseHeaders(code, b.length);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(b);
      }
    });
    server.start();
    System.out.printf("ready %d %d%n", ProcessHandle.current().pid(), server.getAddress().getPort());
    System.out.flush();
    // Runs until stdin closes or the process is signalled.
    while (System.in.read() >= 0) {
    }
    server.stop(0);
    System.exit(0);
  }
}
