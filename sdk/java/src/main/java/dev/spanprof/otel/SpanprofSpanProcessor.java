package dev.spanprof.otel;

import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.context.Context;
import io.opentelemetry.sdk.trace.ReadWriteSpan;
import io.opentelemetry.sdk.trace.ReadableSpan;
import io.opentelemetry.sdk.trace.SpanProcessor;

/**
 * Builds each SDK span's record at its start ({@link SpanRecord}) for the starting thread's
 * attach of it, which then copies it.
 * The SDK calls onStart in startSpan, on the starting thread, before the span is returned to
 * anyone: its attributes (http.route where instrumentation sets it at start) are read without
 * the span's lock. Attributes or a name set later are seen at the next attach, which builds the
 * record again.
 */
final class SpanprofSpanProcessor implements SpanProcessor {
  static final SpanprofSpanProcessor INSTANCE = new SpanprofSpanProcessor();

  private SpanprofSpanProcessor() {}

  @Override
  public void onStart(Context parentContext, ReadWriteSpan span) {
    if (!NativeLib.loaded()) {
      return;
    }
    SpanContext sc = span.getSpanContext();
    if (!sc.isValid()) {
      return;
    }
    try {
      // For this thread's attach of the span; a thread without records
      // (a virtual thread) leaves it to the attach, wherever that is.
      Object st = SpanprofContextStorage.state();
      if (!(st instanceof ThreadRecords)) {
        return;
      }
      ((ThreadRecords) st).started(span, sc);
      if (!SpanprofThreadContext.STATS.startBuilds) {
        SpanprofThreadContext.STATS.startBuilds = true;
      }
    } catch (RuntimeException e) {
      // Never fail the span's start: its first attach builds the record (or counts the error).
      SpanprofThreadContext.STATS.prepareErrors.increment();
    }
  }

  @Override
  public boolean isStartRequired() {
    return true;
  }

  @Override
  public void onEnd(ReadableSpan span) {}

  @Override
  public boolean isEndRequired() {
    return false;
  }
}
