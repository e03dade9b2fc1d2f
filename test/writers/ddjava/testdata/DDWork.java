import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

/**
 * The workload of test/writers/ddjava: under dd-java-agent (its profiler on, the OpenTelemetry API
 * bridged to the Datadog tracer), threads run spans of known CPU work (a root span with a nested
 * child, then a gap outside any span) and write down the tracer's own view: the native thread id,
 * each span's 128-bit trace id and span id, its local root span id, and the wall-clock windows in
 * which the thread's innermost span was that span ("seg") or none ("gap"). The application has no
 * spanprof code.
 *
 * <p>Usage: DDWork TRUTH THREADS WARMUP_S MEASURE_S. Prints "pid N", waits for "go" on stdin, runs
 * WARMUP_S seconds of spans, then MEASURE_S seconds, the time the test scores.
 */
public class DDWork {
  static volatile long sink;

  static long now() {
    Instant t = Instant.now();
    return t.getEpochSecond() * 1_000_000_000L + t.getNano();
  }

  static void spin(long ms) {
    long end = System.nanoTime() + ms * 1_000_000L;
    long x = sink;
    while (System.nanoTime() < end) {
      for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005L + 1442695040888963407L;
      }
    }
    sink = x;
  }

  static String tid() {
    try {
      String p = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString(); // PID/task/TID
      return p.substring(p.lastIndexOf('/') + 1);
    } catch (Exception e) {
      throw new IllegalStateException("read /proc/thread-self", e);
    }
  }

  static String ids(Span s) {
    return s.getSpanContext().getTraceId() + " " + s.getSpanContext().getSpanId();
  }

  /** One round: root [20 ms, child 30 ms, 10 ms], then 15 ms outside spans. */
  static void round(Tracer tracer, String tid, List<String> out) {
    long o0 = now();
    Span root = tracer.spanBuilder("work.root").startSpan();
    Scope rs = root.makeCurrent();
    long i0 = now();
    spin(20);
    long i1 = now();
    Span child = tracer.spanBuilder("work.child").startSpan();
    Scope cs = child.makeCurrent();
    long c0 = now();
    spin(30);
    long c1 = now();
    cs.close();
    long i2 = now();
    child.end();
    spin(10);
    long i3 = now();
    rs.close();
    long o3 = now();
    root.end();
    spin(15);
    long g1 = now();
    // The local root span of both spans is the root span: its span id.
    String lrs = root.getSpanContext().getSpanId();
    out.add(String.join(" ", "seg", tid, ids(root), "work.root", lrs, o0 + " " + i0 + " " + i1 + " " + c0));
    out.add(String.join(" ", "seg", tid, ids(child), "work.child", lrs, i1 + " " + c0 + " " + c1 + " " + i2));
    out.add(String.join(" ", "seg", tid, ids(root), "work.root", lrs, c1 + " " + i2 + " " + i3 + " " + o3));
    out.add(String.join(" ", "gap", tid, i3 + " " + o3 + " " + g1 + " " + g1));
  }

  public static void main(String[] args) throws Exception {
    String truth = args[0];
    int threads = Integer.parseInt(args[1]);
    long warmNs = Long.parseLong(args[2]) * 1_000_000_000L;
    long measureNs = Long.parseLong(args[3]) * 1_000_000_000L;
    System.out.println("pid " + ProcessHandle.current().pid());
    System.out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    if (!"go".equals(in.readLine())) {
      throw new IllegalStateException("want go on stdin");
    }
    long setup = now();
    Tracer tracer = GlobalOpenTelemetry.getTracer("ddwork");
    long measureFrom = now() + warmNs;
    long measureTo = measureFrom + measureNs;
    List<List<String>> lines = new ArrayList<>();
    List<Thread> workers = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      List<String> out = new ArrayList<>();
      lines.add(out);
      Thread w = new Thread(() -> {
        String tid = tid();
        while (now() < measureTo) {
          round(tracer, tid, out);
        }
      }, "ddwork-" + t);
      w.start();
      workers.add(w);
    }
    for (Thread w : workers) {
      w.join();
    }
    try (PrintWriter pw = new PrintWriter(Files.newBufferedWriter(Paths.get(truth)))) {
      pw.println("setup " + setup);
      pw.println("measure " + measureFrom + " " + measureTo);
      for (List<String> out : lines) {
        for (String l : out) {
          pw.println(l);
        }
      }
    }
  }
}
