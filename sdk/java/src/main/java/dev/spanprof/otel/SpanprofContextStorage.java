package dev.spanprof.otel;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextStorage;
import io.opentelemetry.context.Scope;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A ContextStorage wrapper: every attach publishes the attached context's span as the thread's
 * record, and closing the scope publishes what was there before. The delegate keeps the context
 * itself; this only mirrors it for the profiler.
 */
final class SpanprofContextStorage implements ContextStorage {
  private static final ThreadLocal<Object> STATE = ThreadLocal.withInitial(SpanprofContextStorage::stateFor);
  /** Marks threads whose native TLS is not their own: virtual threads. */
  private static final Object VIRTUAL = new Object();
  /** Marks threads without records (library not loaded, or set-up failed). */
  private static final Object OFF = new Object();

  private static final AtomicBoolean WARNED = new AtomicBoolean();

  private final ContextStorage delegate;

  SpanprofContextStorage(ContextStorage delegate) {
    this.delegate = delegate;
    SpanprofThreadContext.STATS.wrapped = true;
  }

  /** The calling thread's ThreadRecords, or a marker for a thread without. */
  static Object state() {
    return STATE.get();
  }

  private static Object stateFor() {
    if (Threads.isVirtual(Thread.currentThread())) {
      return VIRTUAL;
    }
    if (!NativeLib.loaded()) {
      return OFF;
    }
    ThreadRecords r = ThreadRecords.setUp();
    if (r == null) {
      SpanprofThreadContext.STATS.setupFailures.increment();
      return OFF;
    }
    SpanprofThreadContext.STATS.threads.increment();
    return r;
  }

  @Override
  public Scope attach(Context toAttach) {
    Scope inner = delegate.attach(toAttach);
    Object st = STATE.get();
    if (!(st instanceof ThreadRecords)) {
      if (st == VIRTUAL) {
        SpanprofThreadContext.STATS.virtualSkipped.increment();
      } else {
        SpanprofThreadContext.STATS.offSkipped.increment();
      }
      return inner;
    }
    ThreadRecords r = (ThreadRecords) st;
    int beforeDepth = r.depth;
    int beforeIdx = r.published;
    int beforeGen = r.generation(beforeIdx);
    try {
      r.enter(toAttach == null ? null : Span.fromContextOrNull(toAttach));
    } catch (RuntimeException e) {
      failed(r, e); // the application's attach has happened: never fail it
    }
    return new RecordScope(inner, r, beforeDepth, beforeIdx, beforeGen);
  }

  /** A switch whose record could not be written: NULL published, counted, said once. */
  private static void failed(ThreadRecords r, RuntimeException e) {
    r.clear();
    SpanprofThreadContext.STATS.errors.increment();
    if (WARNED.compareAndSet(false, true)) {
      System.err.println("spanprof-otel: thread context not published for a context switch (NULL instead): " + e);
    }
  }

  @Override
  public Context current() {
    return delegate.current();
  }

  @Override
  public Context root() {
    return delegate.root();
  }

  private static final class RecordScope implements Scope {
    private final Scope inner;
    private final ThreadRecords records;
    private final int beforeDepth;
    private final int beforeIdx;
    private final int beforeGen;
    private boolean closed;

    RecordScope(Scope inner, ThreadRecords records, int beforeDepth, int beforeIdx, int beforeGen) {
      this.inner = inner;
      this.records = records;
      this.beforeDepth = beforeDepth;
      this.beforeIdx = beforeIdx;
      this.beforeGen = beforeGen;
    }

    @Override
    public void close() {
      inner.close();
      if (closed) {
        return;
      }
      closed = true;
      // A scope closed on another thread: the delegate restored that
      // thread's context, not the owner's, whose storage still holds the
      // attached context, and so does its record. Only the owner writes
      // its records; counted.
      if (Thread.currentThread() != records.owner) {
        SpanprofThreadContext.STATS.foreignCloses.increment();
        return;
      }
      try {
        records.restore(beforeDepth, beforeIdx, beforeGen);
      } catch (RuntimeException e) {
        failed(records, e);
      }
    }
  }
}
