package dev.spanprof.otel;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextStorage;
import io.opentelemetry.context.Scope;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A ContextStorage wrapper: every attach publishes the attached context's span as the thread's
 * record, and closing the scope publishes what was there before.
 *
 * <p>Over OpenTelemetry's default storage (a thread-local holding the current context, the usual
 * case) this storage keeps the context itself, beside the thread's records in one thread-local
 * object, with the default storage's behaviour (a null context or the current one attached
 * changes nothing; a scope closed when its context is no longer current is ignored, logged at
 * FINE): an attach then costs one thread-local lookup, where delegating costs the default's four
 * and ours. Over any other storage, that storage keeps the context and this only mirrors it.
 */
final class SpanprofContextStorage implements ContextStorage {
  private static final Logger log = Logger.getLogger(SpanprofContextStorage.class.getName());
  /** The calling thread's {@link PerThread}, null until its first attach (or span start). */
  private static final ThreadLocal<PerThread> STATE = new ThreadLocal<>();
  /** Marks threads whose native TLS is not their own: virtual threads. */
  private static final Object VIRTUAL = new Object();
  /** Marks threads without records (library not loaded, or set-up failed). */
  private static final Object OFF = new Object();

  private static final AtomicBoolean WARNED = new AtomicBoolean();

  private final ContextStorage delegate;
  /** Whether this storage keeps the context (the delegate is OpenTelemetry's default storage). */
  private final boolean own;

  /** A thread's current context (when the storage keeps it) and its records or marker. */
  static final class PerThread {
    Context current;
    final Object state = stateFor();
    /** The thread this is of: a scope's close on it needs no thread-local lookup. */
    final Thread thread = Thread.currentThread();
  }

  SpanprofContextStorage(ContextStorage delegate) {
    this(delegate, delegate == ContextStorage.defaultStorage());
  }

  /** own: keep the context here, in place of the delegate (which must be the default storage). */
  SpanprofContextStorage(ContextStorage delegate, boolean own) {
    this.delegate = delegate;
    this.own = own;
    SpanprofThreadContext.STATS.wrapped = true;
    if (own) {
      SpanprofThreadContext.STATS.ownStorage = true;
    }
  }

  /** The calling thread's PerThread, made at its first use. */
  private static PerThread perThread() {
    PerThread t = STATE.get();
    if (t == null) {
      t = new PerThread();
      STATE.set(t);
    }
    return t;
  }

  /** The calling thread's ThreadRecords, or a marker for a thread without. */
  static Object state() {
    return perThread().state;
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
    if (own) {
      return attachOwn(toAttach);
    }
    Scope inner = delegate.attach(toAttach);
    Object st = perThread().state;
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

  /** An attach when this storage keeps the context: the default storage's, and the record's. */
  private Scope attachOwn(Context toAttach) {
    if (toAttach == null) {
      return Scope.noop(); // the default storage ignores a null context
    }
    PerThread t = perThread();
    Context before = t.current;
    if (toAttach == before) {
      return Scope.noop(); // already current: its record too
    }
    t.current = toAttach;
    Object st = t.state;
    if (!(st instanceof ThreadRecords)) {
      if (st == VIRTUAL) {
        SpanprofThreadContext.STATS.virtualSkipped.increment();
      } else {
        SpanprofThreadContext.STATS.offSkipped.increment();
      }
      return new OwnScope(t, before, toAttach, null, 0, 0, 0);
    }
    ThreadRecords r = (ThreadRecords) st;
    int beforeDepth = r.depth;
    int beforeIdx = r.published;
    int beforeGen = r.generation(beforeIdx);
    try {
      r.enter(Span.fromContextOrNull(toAttach));
    } catch (RuntimeException e) {
      failed(r, e); // the application's attach has happened: never fail it
    }
    return new OwnScope(t, before, toAttach, r, beforeDepth, beforeIdx, beforeGen);
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
    if (own) {
      PerThread t = STATE.get();
      return t == null ? null : t.current;
    }
    return delegate.current();
  }

  @Override
  public Context root() {
    return delegate.root();
  }

  /** A scope of an attach when this storage keeps the context (records null: none published). */
  private static final class OwnScope implements Scope {
    private final PerThread owner;
    private final Context before;
    private final Context attached;
    private final ThreadRecords records;
    private final int beforeDepth;
    private final int beforeIdx;
    private final int beforeGen;
    private boolean closed;

    OwnScope(PerThread owner, Context before, Context attached, ThreadRecords records, int beforeDepth, int beforeIdx, int beforeGen) {
      this.owner = owner;
      this.before = before;
      this.attached = attached;
      this.records = records;
      this.beforeDepth = beforeDepth;
      this.beforeIdx = beforeIdx;
      this.beforeGen = beforeGen;
    }

    @Override
    public void close() {
      PerThread t = owner;
      if (Thread.currentThread() != t.thread) {
        closeForeign(STATE.get());
        return;
      }
      if (closed || t.current != attached) {
        log.log(Level.FINE, "Trying to close scope which does not represent current context. Ignoring the call.");
        return;
      }
      closed = true;
      t.current = before;
      if (records == null) {
        return;
      }
      try {
        records.restore(beforeDepth, beforeIdx, beforeGen);
      } catch (RuntimeException e) {
        failed(records, e);
      }
    }

    /**
     * A scope closed on a thread other than its own: as the default storage does, that thread's
     * context is restored if the scope's is current there; the owner's context and records stay
     * (only the owner writes them). Counted.
     */
    private void closeForeign(PerThread t) {
      if (records != null) {
        SpanprofThreadContext.STATS.foreignCloses.increment();
      }
      if (closed || t == null || t.current != attached) {
        log.log(Level.FINE, "Trying to close scope which does not represent current context. Ignoring the call.");
        return;
      }
      closed = true;
      t.current = before;
    }
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
