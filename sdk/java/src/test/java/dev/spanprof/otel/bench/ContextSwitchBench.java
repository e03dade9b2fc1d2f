package dev.spanprof.otel.bench;

import dev.spanprof.otel.SpanprofThreadContext;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * ns per context attach + restore (makeCurrent, close) with the plain SDK context storage
 * ("plain") and with spanprof's wrapper and span processor ("spanprof"; "spanprof-noproc": the
 * wrapper alone). Each storage runs in forks of its own: the storage is chosen once per JVM,
 * before the first context use.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(2)
@State(org.openjdk.jmh.annotations.Scope.Thread)
public class ContextSwitchBench {
  @Param({"plain", "spanprof"})
  public String storage;

  private Context one;
  private final Context[] many = new Context[64];
  private final Context[] internal = new Context[64];
  private int next;
  private Tracer tracer;

  @Setup
  public void setUp() throws Exception {
    if (storage.startsWith("spanprof") && !storage.equals("spanprof-old")) {
      SpanprofThreadContext.install();
    } else if (storage.equals("spanprof-old")) {
      installFrom(System.getProperty("spanprof.bench.old"));
    }
    // As SDK autoconfigure and the agent set spanprof up: the storage
    // wrapper and the span processor that builds each span's record at its
    // start. "spanprof-noproc": the wrapper alone (a hand-built SDK without
    // the processor: each span's first attach builds its record). The old
    // build's processor, when it has one.
    io.opentelemetry.sdk.trace.SdkTracerProviderBuilder b = SdkTracerProvider.builder();
    if (storage.equals("spanprof")) {
      b.addSpanProcessor(SpanprofThreadContext.spanProcessor());
    } else if (storage.equals("spanprof-old") && oldProcessor != null) {
      b.addSpanProcessor(oldProcessor);
    }
    tracer = b.build().get("bench");
    one = Context.root().with(span(tracer, "GET /items/{id}"));
    for (int i = 0; i < many.length; i++) {
      many[i] = Context.root().with(span(tracer, "GET /items/" + i));
      internal[i] = Context.root().with(tracer.spanBuilder("compute " + i).startSpan());
    }
    if (storage.startsWith("spanprof") && !storage.equals("spanprof-old") && !SpanprofThreadContext.stats().storageWrapped()) {
      try (Scope s = one.makeCurrent()) {
        // the wrapper is applied at the storage's first use
      }
      if (!SpanprofThreadContext.stats().storageWrapped()) {
        throw new IllegalStateException("spanprof wrapper not installed");
      }
    }
    if (storage.equals("spanprof-old")) {
      try (Scope s = one.makeCurrent()) {
        // as above
      }
      if (!(Boolean) oldStats.getClass().getMethod("storageWrapped").invoke(oldStats)) {
        throw new IllegalStateException("spanprof-old: wrapper not installed");
      }
    }
  }

  private static Object oldStats;
  private static io.opentelemetry.sdk.trace.SpanProcessor oldProcessor;

  // -Dspanprof.bench.cpu=true: each iteration prints the benchmark thread's
  // CPU time per op ("spanprof-bench-cpu CASE STORAGE NS"), which a machine
  // shared with other work does not inflate as it does wall time (the
  // thread's time off the CPU is not counted; GC threads' work is not
  // either: see -prof gc for what is allocated).
  private static final boolean CPU = Boolean.getBoolean("spanprof.bench.cpu");
  private static final java.lang.management.ThreadMXBean THREADS = java.lang.management.ManagementFactory.getThreadMXBean();
  private long ops;
  private long cpuStart;
  private long opsStart;

  @Setup(org.openjdk.jmh.annotations.Level.Iteration)
  public void iterationStart() {
    if (CPU) {
      cpuStart = THREADS.getCurrentThreadCpuTime();
      opsStart = ops;
    }
  }

  @org.openjdk.jmh.annotations.TearDown(org.openjdk.jmh.annotations.Level.Iteration)
  public void iterationEnd(org.openjdk.jmh.infra.BenchmarkParams p) {
    if (CPU) {
      long n = ops - opsStart;
      String bench = p.getBenchmark().substring(p.getBenchmark().lastIndexOf('.') + 1);
      System.out.printf("spanprof-bench-cpu %s %s %.2f%n", bench, storage,
          n == 0 ? 0 : (THREADS.getCurrentThreadCpuTime() - cpuStart) / (double) n);
    }
  }

  /**
   * "spanprof-old": another build of dev.spanprof.otel (its classes directory in
   * -Dspanprof.bench.old), loaded child-first, so a change and the build before it are timed in
   * one run: {@code -p storage=plain,spanprof,spanprof-old -jvmArgsAppend -Dspanprof.bench.old=DIR}.
   */
  private static void installFrom(String dir) throws Exception {
    if (dir == null || dir.isEmpty()) {
      throw new IllegalStateException("spanprof-old needs -Dspanprof.bench.old=CLASSES_DIR");
    }
    ClassLoader parent = ContextSwitchBench.class.getClassLoader();
    java.net.URL[] urls = {java.nio.file.Path.of(dir).toUri().toURL()};
    ClassLoader old = new java.net.URLClassLoader(urls, parent) {
      @Override
      protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
        if (!name.startsWith("dev.spanprof.otel.") || name.startsWith("dev.spanprof.otel.bench.")) {
          return super.loadClass(name, resolve);
        }
        synchronized (getClassLoadingLock(name)) {
          Class<?> c = findLoadedClass(name);
          if (c == null) {
            c = findClass(name);
          }
          if (resolve) {
            resolveClass(c);
          }
          return c;
        }
      }
    };
    Class<?> tc = old.loadClass("dev.spanprof.otel.SpanprofThreadContext");
    tc.getMethod("install").invoke(null);
    oldStats = tc.getMethod("stats").invoke(null);
    try {
      oldProcessor = (io.opentelemetry.sdk.trace.SpanProcessor) tc.getMethod("spanProcessor").invoke(null);
    } catch (NoSuchMethodException e) {
      oldProcessor = null; // a build from before the span processor
    }
  }

  private static Span span(Tracer tracer, String name) {
    return tracer.spanBuilder(name).setSpanKind(SpanKind.SERVER)
        .setAttribute(AttributeKey.stringKey("http.route"), "/items/{id}").startSpan();
  }

  /** The same span attached and restored: its record is republished as it is. */
  @Benchmark
  public void sameSpan() {
    ops++;
    try (Scope s = one.makeCurrent()) {
      // nothing: the cost measured is the switch
    }
  }

  /** A different server span each time: every attach writes a record (ids, name, route). */
  @Benchmark
  public void newSpan() {
    ops++;
    Context c = many[next++ & (many.length - 1)];
    try (Scope s = c.makeCurrent()) {
      // nothing
    }
  }

  /**
   * A span's whole life as instrumentation lives it: start a server span (with http.route), make
   * it current, close the scope, end the span. What the wrapper adds here is its cost per span,
   * next to the SDK's own.
   */
  @Benchmark
  public void spanLifecycle() {
    ops++;
    Span span = span(tracer, "GET /items/{id}");
    try (Scope s = span.makeCurrent()) {
      // nothing
    } finally {
      span.end();
    }
  }

  /** A different internal span each time: ids and name (no http.route read). */
  @Benchmark
  public void newInternalSpan() {
    ops++;
    Context c = internal[next++ & (internal.length - 1)];
    try (Scope s = c.makeCurrent()) {
      // nothing
    }
  }
}
