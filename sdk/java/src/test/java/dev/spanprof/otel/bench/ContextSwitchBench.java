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
 * ("plain") and with spanprof's wrapper ("spanprof"). Each storage runs in forks of its own: the
 * storage is chosen once per JVM, before the first context use.
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
  public void setUp() {
    if (storage.equals("spanprof")) {
      SpanprofThreadContext.install();
    }
    tracer = SdkTracerProvider.builder().build().get("bench");
    one = Context.root().with(span(tracer, "GET /items/{id}"));
    for (int i = 0; i < many.length; i++) {
      many[i] = Context.root().with(span(tracer, "GET /items/" + i));
      internal[i] = Context.root().with(tracer.spanBuilder("compute " + i).startSpan());
    }
    if (storage.equals("spanprof") && !SpanprofThreadContext.stats().storageWrapped()) {
      try (Scope s = one.makeCurrent()) {
        // the wrapper is applied at the storage's first use
      }
      if (!SpanprofThreadContext.stats().storageWrapped()) {
        throw new IllegalStateException("spanprof wrapper not installed");
      }
    }
  }

  private static Span span(Tracer tracer, String name) {
    return tracer.spanBuilder(name).setSpanKind(SpanKind.SERVER)
        .setAttribute(AttributeKey.stringKey("http.route"), "/items/{id}").startSpan();
  }

  /** The same span attached and restored: its record is republished as it is. */
  @Benchmark
  public void sameSpan() {
    try (Scope s = one.makeCurrent()) {
      // nothing: the cost measured is the switch
    }
  }

  /** A different server span each time: every attach writes a record (ids, name, route). */
  @Benchmark
  public void newSpan() {
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
    Context c = internal[next++ & (internal.length - 1)];
    try (Scope s = c.makeCurrent()) {
      // nothing
    }
  }
}
