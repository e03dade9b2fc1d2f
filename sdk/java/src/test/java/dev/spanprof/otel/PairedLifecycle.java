package dev.spanprof.otel;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextStorage;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;

/**
 * The cost spanprof adds to a span's life (start a server span with http.route, attach it, close
 * the scope, end it), timed with and without spanprof in one JVM, in alternating blocks of a few
 * milliseconds: on a machine shared with other work, the load then weighs on both sides of each
 * pair alike, which separate forks (JMH's) cannot give. Not a unit test: run it as a program
 * ({@code make java-bench-paired}).
 *
 * <p>"plain" is the SDK without spanprof's span processor, attaching through OpenTelemetry's default
 * thread-local storage; "spanprof" is the SDK with the processor, attaching through spanprof's
 * storage over that default, as {@link SpanprofThreadContext#install()} sets it up. Both attach
 * through the storage object directly (what {@code Span.makeCurrent()} reaches through {@code
 * ContextStorage.get()}), so one JVM holds both.
 *
 * <p>Prints, per case, the median and quartiles over the rounds of the per-op difference
 * (spanprof - plain), in thread CPU time and in wall time, and each side's median.
 */
public final class PairedLifecycle {
  private static final AttributeKey<String> ROUTE = AttributeKey.stringKey("http.route");
  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  private final Tracer plainTracer = SdkTracerProvider.builder().build().get("bench");
  private final Tracer spanprofTracer;
  private final ContextStorage plainStorage = ContextStorage.defaultStorage();
  private final ContextStorage spanprofStorage;
  private long sink;

  /**
   * part: what the spanprof side has: "all" (processor and storage), "processor" (the span
   * processor alone, to time its part), "storage" (the storage alone).
   */
  private PairedLifecycle(String part) {
    boolean proc = part.equals("all") || part.equals("processor");
    boolean storage = part.equals("all") || part.equals("storage");
    if (!proc && !storage) {
      throw new IllegalArgumentException("part: all, processor or storage, not " + part);
    }
    spanprofTracer = proc
        ? SdkTracerProvider.builder().addSpanProcessor(SpanprofThreadContext.spanProcessor()).build().get("bench")
        : SdkTracerProvider.builder().build().get("bench");
    spanprofStorage = storage ? new SpanprofContextStorage(ContextStorage.defaultStorage()) : ContextStorage.defaultStorage();
  }

  public static void main(String[] args) {
    int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 200;
    int ops = args.length > 1 ? Integer.parseInt(args[1]) : 20000;
    if (!NativeLib.loaded()) {
      throw new IllegalStateException("spanprof-otel JNI library not loaded: " + NativeLib.unavailable);
    }
    String part = args.length > 2 ? args[2] : "all";
    PairedLifecycle b = new PairedLifecycle(part);
    // Warm-up: both paths compiled before the first timed round.
    for (int i = 0; i < 30; i++) {
      b.plain(ops);
      b.spanprof(ops);
    }
    long[] cpuP = new long[rounds];
    long[] cpuS = new long[rounds];
    long[] wallP = new long[rounds];
    long[] wallS = new long[rounds];
    long[] t = new long[2];
    for (int r = 0; r < rounds; r++) {
      // ABBA order: a drift within the round weighs on both alike.
      boolean plainFirst = (r & 1) == 0;
      if (plainFirst) {
        b.time(false, ops, t);
        cpuP[r] = t[0];
        wallP[r] = t[1];
        b.time(true, ops, t);
        cpuS[r] = t[0];
        wallS[r] = t[1];
      } else {
        b.time(true, ops, t);
        cpuS[r] = t[0];
        wallS[r] = t[1];
        b.time(false, ops, t);
        cpuP[r] = t[0];
        wallP[r] = t[1];
      }
    }
    System.out.printf("spanLifecycle paired: java %s, spanprof side: %s, %d rounds of %d ops each side%n",
        System.getProperty("java.version"), part, rounds, ops);
    report("thread cpu", cpuP, cpuS, ops);
    report("wall", wallP, wallS, ops);
    if (b.sink == 42) {
      System.out.println();
    }
  }

  private static void report(String what, long[] p, long[] s, int ops) {
    int n = p.length;
    double[] d = new double[n];
    double[] pp = new double[n];
    double[] ss = new double[n];
    for (int i = 0; i < n; i++) {
      pp[i] = p[i] / (double) ops;
      ss[i] = s[i] / (double) ops;
      d[i] = ss[i] - pp[i];
    }
    Arrays.sort(d);
    Arrays.sort(pp);
    Arrays.sort(ss);
    System.out.printf("  %-10s added median %.1f ns/op (quartiles %.1f .. %.1f); plain median %.1f, spanprof median %.1f%n",
        what, d[n / 2], d[n / 4], d[3 * n / 4], pp[n / 2], ss[n / 2]);
  }

  private void time(boolean withSpanprof, int ops, long[] out) {
    long c0 = THREADS.getCurrentThreadCpuTime();
    long w0 = System.nanoTime();
    if (withSpanprof) {
      spanprof(ops);
    } else {
      plain(ops);
    }
    out[1] = System.nanoTime() - w0;
    out[0] = THREADS.getCurrentThreadCpuTime() - c0;
  }

  private void plain(int ops) {
    Tracer tr = plainTracer;
    ContextStorage st = plainStorage;
    for (int i = 0; i < ops; i++) {
      Span span = tr.spanBuilder("GET /items/{id}").setSpanKind(SpanKind.SERVER).setAttribute(ROUTE, "/items/{id}").startSpan();
      Context cur = st.current();
      try (Scope s = st.attach((cur == null ? st.root() : cur).with(span))) {
        sink += i;
      } finally {
        span.end();
      }
    }
  }

  private void spanprof(int ops) {
    Tracer tr = spanprofTracer;
    ContextStorage st = spanprofStorage;
    for (int i = 0; i < ops; i++) {
      Span span = tr.spanBuilder("GET /items/{id}").setSpanKind(SpanKind.SERVER).setAttribute(ROUTE, "/items/{id}").startSpan();
      Context cur = st.current();
      try (Scope s = st.attach((cur == null ? st.root() : cur).with(span))) {
        sink += i;
      } finally {
        span.end();
      }
    }
  }
}
