package dev.spanprof.otel;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.context.ContextStorage;
import io.opentelemetry.sdk.resources.Resource;
import io.opentelemetry.sdk.trace.SpanProcessor;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;

/**
 * Publishes each platform thread's current OpenTelemetry span as the OTEP 4947 thread-context
 * record spanprof reads, and the service's resource as the OTEP 4719 process context.
 *
 * <p>Under the Java agent ({@code -Dotel.javaagent.extensions=spanprof-otel.jar}) and with SDK
 * autoconfigure, {@link SpanprofCustomizer} calls both for you. With a hand-built SDK call {@link
 * #install()} before the first span is made current, add {@link #spanProcessor()} to the tracer
 * provider, and call {@link #publishProcessContext(Resource)} with the SDK's resource.
 */
public final class SpanprofThreadContext {
  /** The counters of what was and was not published. */
  public static final class Stats {
    final LongAdder threads = new LongAdder();
    final LongAdder virtualSkipped = new LongAdder();
    final LongAdder offSkipped = new LongAdder();
    final LongAdder setupFailures = new LongAdder();
    final LongAdder lostRestores = new LongAdder();
    final LongAdder foreignCloses = new LongAdder();
    final LongAdder errors = new LongAdder();
    final LongAdder prepareErrors = new LongAdder();
    volatile boolean wrapped;
    volatile boolean ownStorage;
    volatile boolean startBuilds;

    private Stats() {}

    /** Platform threads set up with records. */
    public long threads() {
      return threads.sum();
    }

    /** Attaches on virtual threads, not published: their native TLS is their carrier's. */
    public long virtualThreadAttachesSkipped() {
      return virtualSkipped.sum();
    }

    /** Attaches not published because the JNI library or a thread's set-up failed. */
    public long disabledAttachesSkipped() {
      return offSkipped.sum();
    }

    /** Threads whose set-up failed (out of memory). */
    public long setupFailures() {
      return setupFailures.sum();
    }

    /**
     * Scope closes that published NULL instead of the previous record, whose buffer had been reused
     * (scopes closed out of order, or nesting deeper than 8 levels).
     */
    public long restoresPublishedNull() {
      return lostRestores.sum();
    }

    /** Scopes closed on a thread other than the one that attached them. */
    public long foreignThreadCloses() {
      return foreignCloses.sum();
    }

    /** Context switches whose record could not be written (NULL published instead). */
    public long errors() {
      return errors.sum();
    }

    /** Span starts whose record could not be built (built again at the span's first attach). */
    public long spanStartErrors() {
      return prepareErrors.sum();
    }

    /**
     * Whether the span processor has built a record at a span's start (else, without it, each
     * span's first attach builds it).
     */
    public boolean recordsBuiltAtStart() {
      return startBuilds;
    }

    /** Whether the context storage in use is wrapped, i.e. attaches are being published. */
    public boolean storageWrapped() {
      return wrapped;
    }

    /**
     * Whether spanprof's storage keeps the current context itself, in place of OpenTelemetry's
     * default thread-local storage (false when it wraps another storage, which keeps it).
     */
    public boolean storageKeepsContext() {
      return ownStorage;
    }

    @Override
    public String toString() {
      return String.format(
          "spanprof-otel: thread context %s; %d threads set up; %d virtual-thread attaches not published;"
              + " %d attaches not published (library: %s); %d restores published NULL; %d scopes closed on another thread;"
              + " %d switches failed; records built at %s; %d span starts failed",
          !wrapped ? "NOT published (context storage not wrapped)"
              : ownStorage ? "published (spanprof's storage keeps the context)" : "published (over another context storage)",
          threads(),
          virtualThreadAttachesSkipped(),
          disabledAttachesSkipped(),
          // Unwrapped, nothing loaded it: do not load it at shutdown just to say.
          !wrapped ? "not needed" : NativeLib.loaded() ? "loaded" : NativeLib.unavailable,
          restoresPublishedNull(),
          foreignThreadCloses(),
          errors(),
          startBuilds ? "span start" : "first attach (no span processor)",
          spanStartErrors());
    }
  }

  static final Stats STATS = new Stats();
  private static final AtomicBoolean installed = new AtomicBoolean();

  private SpanprofThreadContext() {}

  /** The counters. */
  public static Stats stats() {
    return STATS;
  }

  /**
   * The span processor that builds each span's record at its start, so that attaches only copy
   * it (without it a span's first attach builds the record, taking the span's lock for
   * http.route). SDK autoconfigure and the Java agent add it; a hand-built SDK adds it with
   * {@code SdkTracerProvider.builder().addSpanProcessor(SpanprofThreadContext.spanProcessor())}.
   */
  public static SpanProcessor spanProcessor() {
    return SpanprofSpanProcessor.INSTANCE;
  }

  /**
   * Wraps OpenTelemetry's context storage (ContextStorage.addWrapper), once. Must run before the
   * storage's first use: later calls are ignored by OpenTelemetry, which {@link
   * Stats#storageWrapped()} then shows. Logs the counters at JVM shutdown.
   */
  public static void install() {
    if (!installed.compareAndSet(false, true)) {
      return;
    }
    if (storageInitialized()) {
      System.err.println("spanprof-otel: the OpenTelemetry context storage is already in use, so the thread"
          + " context cannot be published: call SpanprofThreadContext.install() before the first span or"
          + " context is made current (or use SDK autoconfigure / the Java agent extension)");
    }
    ContextStorage.addWrapper(SpanprofContextStorage::new);
    // stderr, not java.util.logging: the log manager resets its handlers
    // in its own shutdown hook, which may run first.
    Runtime.getRuntime()
        .addShutdownHook(new Thread(() -> System.err.println(STATS), "spanprof-otel-stats"));
  }

  /**
   * Whether OpenTelemetry already built its context storage, after which it ignores wrappers (and
   * says so only at FINE). Read by reflection, as nothing public tells; false when that fails.
   */
  private static boolean storageInitialized() {
    try {
      Class<?> w = Class.forName(ContextStorage.class.getName() + "Wrappers", false, ContextStorage.class.getClassLoader());
      java.lang.reflect.Field f = w.getDeclaredField("storageInitialized");
      f.setAccessible(true);
      return f.getBoolean(null);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return false;
    }
  }

  /**
   * Publishes the process context: the resource's attributes (service.name ...) and the thread
   * records' attribute key map. Returns false (and says why on stderr) when it could not.
   */
  public static boolean publishProcessContext(Resource resource) {
    if (!NativeLib.loaded()) {
      return false;
    }
    ByteArrayOutputStream attrs = new ByteArrayOutputStream();
    for (Map.Entry<AttributeKey<?>, Object> e : resource.getAttributes().asMap().entrySet()) {
      cstring(attrs, e.getKey().getKey());
      cstring(attrs, String.valueOf(e.getValue()));
    }
    ByteArrayOutputStream keys = new ByteArrayOutputStream();
    for (String k : SpanAttrs.KEYS) {
      cstring(keys, k);
    }
    int rc = NativeLib.publishProcess(attrs.toByteArray(), keys.toByteArray());
    if (rc != 0) {
      System.err.println("spanprof-otel: publish the process context: errno " + rc);
    }
    return rc == 0;
  }

  private static void cstring(ByteArrayOutputStream out, String s) {
    // NUL ends each string on the C side; a NUL inside a value would cut it.
    byte[] b = s.replace('\0', ' ').getBytes(StandardCharsets.UTF_8);
    out.write(b, 0, b.length);
    out.write(0);
  }
}
