package dev.spanprof.otel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextStorage;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.resources.Resource;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Checks the records the wrapper publishes against the spans the SDK made, read back as a profiler would. */
class ThreadContextTest {
  /** Without spanprof's span processor: a span's first attach builds its record. */
  static Tracer tracer;
  /** With it (as autoconfigure and the agent set up): records are built at span start. */
  static Tracer started;

  @BeforeAll
  static void setUp() {
    SpanprofThreadContext.install(); // before the storage's first use
    tracer = SdkTracerProvider.builder().build().get("test");
    started = SdkTracerProvider.builder().addSpanProcessor(SpanprofThreadContext.spanProcessor()).build().get("test");
    assertTrue(NativeLib.loaded(), "JNI library: " + NativeLib.unavailable);
  }

  /** A record as the reader decodes it: ids, flags, attributes by key. */
  record Rec(String trace, String span, int valid, int flags, Map<Integer, String> attrs) {}

  static Rec current() {
    long p = NativeLib.slot();
    if (p == 0) {
      return null;
    }
    byte[] b = new byte[ThreadRecords.RECORD];
    NativeLib.peek(p, b);
    return decode(b);
  }

  static Rec decode(byte[] b) {
    StringBuilder t = new StringBuilder();
    for (int i = 0; i < 24; i++) {
      t.append(String.format("%02x", b[i] & 0xff));
    }
    int n = ByteBuffer.wrap(b, 26, 2).order(ByteOrder.nativeOrder()).getShort() & 0xffff;
    Map<Integer, String> attrs = new HashMap<>();
    for (int i = 28; i < 28 + n; ) {
      int key = b[i] & 0xff;
      int len = b[i + 1] & 0xff;
      attrs.put(key, new String(b, i + 2, len, StandardCharsets.UTF_8));
      i += 2 + len;
    }
    return new Rec(t.substring(0, 32), t.substring(32), b[24], b[25] & 0xff, attrs);
  }

  static void assertPublished(Span s, String name, String route) {
    Rec r = current();
    assertTrue(r != null, "no record published for " + name);
    assertEquals(s.getSpanContext().getTraceId(), r.trace);
    assertEquals(s.getSpanContext().getSpanId(), r.span);
    assertEquals(1, r.valid);
    assertEquals(s.getSpanContext().getTraceFlags().asByte() & 0xff, r.flags);
    assertEquals(name, r.attrs.get(0));
    assertEquals(route, r.attrs.get(1));
  }

  @Test
  void attachPublishesAndRestoreReturnsToParent() {
    assertEquals(0, NativeLib.slot(), "outside spans the pointer is NULL");
    Span root = tracer.spanBuilder("GET /items/{id}").setSpanKind(SpanKind.SERVER)
        .setAttribute(AttributeKey.stringKey("http.route"), "/items/{id}").startSpan();
    try (Scope a = root.makeCurrent()) {
      assertPublished(root, "GET /items/{id}", "/items/{id}");
      Span child = tracer.spanBuilder("child").startSpan();
      try (Scope b = child.makeCurrent()) {
        assertPublished(child, "child", null);
        Span internal = tracer.spanBuilder("internal").setAttribute(AttributeKey.stringKey("http.route"), "/x").startSpan();
        try (Scope i = internal.makeCurrent()) {
          assertPublished(internal, "internal", null); // http.route is read from server spans only
        }
        try (Scope c = Context.root().makeCurrent()) {
          assertEquals(0, NativeLib.slot(), "a context without a span publishes NULL");
        }
        assertPublished(child, "child", null);
      }
      assertPublished(root, "GET /items/{id}", "/items/{id}");
    }
    assertEquals(0, NativeLib.slot());
  }

  @Test
  void invalidSpanPublishesNull() {
    try (Scope s = Span.getInvalid().makeCurrent()) {
      assertEquals(0, NativeLib.slot());
    }
  }

  @Test
  void remoteParentPublishesNullAndItsChildIsPublished() {
    SpanContext remote = SpanContext.createFromRemoteParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7",
        TraceFlags.getSampled(), TraceState.getDefault());
    try (Scope p = Span.wrap(remote).makeCurrent()) {
      assertEquals(0, NativeLib.slot(), "a propagated parent is another process's span");
      Span child = tracer.spanBuilder("handle").startSpan();
      try (Scope c = child.makeCurrent()) {
        Rec r = current();
        assertEquals("4bf92f3577b34da6a3ce929d0e0e4736" + child.getSpanContext().getSpanId(), r.trace() + r.span());
      } finally {
        child.end();
      }
      assertEquals(0, NativeLib.slot());
    }
  }

  @Test
  void publishedRecordIsNeverRewritten() {
    Span root = tracer.spanBuilder("root").startSpan();
    try (Scope a = root.makeCurrent()) {
      long p = NativeLib.slot();
      byte[] before = new byte[ThreadRecords.RECORD];
      NativeLib.peek(p, before);
      for (int i = 0; i < 50; i++) {
        Span c = tracer.spanBuilder("c" + i).startSpan();
        try (Scope s = c.makeCurrent()) {
          assertPublished(c, "c" + i, null);
          byte[] now = new byte[ThreadRecords.RECORD];
          NativeLib.peek(p, now);
          assertArrayEquals(before, now, "the parent's published record changed under a child");
        }
        assertEquals(p, NativeLib.slot(), "the parent's record is republished as it was");
      }
    }
  }

  @Test
  void deepNestingNeverPublishesAWrongRecord() {
    List<Span> spans = new ArrayList<>();
    List<Scope> scopes = new ArrayList<>();
    for (int i = 0; i < 12; i++) {
      Span s = tracer.spanBuilder("d" + i).startSpan();
      spans.add(s);
      scopes.add(s.makeCurrent());
      assertPublished(s, "d" + i, null);
    }
    for (int i = 11; i >= 0; i--) {
      scopes.get(i).close();
      Rec r = current();
      if (i == 0) {
        assertEquals(null, r);
      } else if (r != null) { // NULL is allowed where the level was reused, a wrong span is not
        assertEquals(spans.get(i - 1).getSpanContext().getSpanId(), r.span);
      }
    }
    // Levels within the depth come back exactly.
    assertTrue(SpanprofThreadContext.stats().restoresPublishedNull() > 0, "the reused deepest level was counted");
  }

  @Test
  void outOfOrderCloseNeverPublishesAWrongRecord() {
    assertTrue(SpanprofThreadContext.stats().storageKeepsContext(), "over the default storage, spanprof's keeps the context");
    Span a = tracer.spanBuilder("a").startSpan();
    Span b = tracer.spanBuilder("b").startSpan();
    Scope sa = a.makeCurrent();
    Scope sb = b.makeCurrent();
    sa.close(); // wrong order: ignored, as the default storage does (a's context is not current)
    assertEquals(b, Span.current());
    assertPublished(b, "b", null);
    for (int i = 0; i < 3; i++) {
      Span c = tracer.spanBuilder("c").startSpan();
      try (Scope sc = c.makeCurrent()) {
        assertPublished(c, "c", null);
      }
      assertPublished(b, "b", null);
    }
    sb.close(); // the storage restores a
    assertEquals(a, Span.current());
    assertPublished(a, "a", null);
    sa.close(); // a's context is current now: what was before it comes back
    assertEquals(Span.getInvalid(), Span.current());
    assertEquals(0, NativeLib.slot());
    try (Scope s = Context.root().makeCurrent()) {
      assertEquals(0, NativeLib.slot());
    }
  }

  @Test
  void theStorageBehavesAsTheDefaultOne() {
    Span a = tracer.spanBuilder("a").startSpan();
    ContextStorage st = ContextStorage.get();
    assertEquals(Scope.noop(), st.attach(null), "a null context changes nothing");
    assertEquals(0, NativeLib.slot());
    try (Scope sa = a.makeCurrent()) {
      assertEquals(Scope.noop(), st.attach(Context.current()), "the current context attached again changes nothing");
      assertPublished(a, "a", null);
      sa.close();
      sa.close(); // twice: the second is ignored
      assertEquals(null, st.current());
      assertEquals(0, NativeLib.slot());
    }
    // A scope closed on another thread restores nothing of its own thread.
    long foreign = SpanprofThreadContext.stats().foreignThreadCloses();
    Scope sa = a.makeCurrent();
    onThread(() -> {
      sa.close();
      assertEquals(null, ContextStorage.get().current(), "the other thread's context changed");
    });
    assertEquals(foreign + 1, SpanprofThreadContext.stats().foreignThreadCloses());
    assertEquals(a, Span.current(), "a close on another thread restored this one's context");
    assertPublished(a, "a", null);
    sa.close(); // on its own thread: the other's close was ignored, this one restores
    assertEquals(Span.getInvalid(), Span.current());
    assertEquals(0, NativeLib.slot());
  }

  @Test
  void overAnotherStorageTheRecordsMirrorIt() {
    // A storage that is not the default one keeps the context; spanprof's only publishes.
    ContextStorage other = new ContextStorage() {
      @Override
      public Scope attach(Context toAttach) {
        return ContextStorage.defaultStorage().attach(toAttach);
      }

      @Override
      public Context current() {
        return ContextStorage.defaultStorage().current();
      }
    };
    ContextStorage st = new SpanprofContextStorage(other);
    Span a = tracer.spanBuilder("a").startSpan();
    Span b = tracer.spanBuilder("b").startSpan();
    try (Scope sa = st.attach(Context.root().with(a))) {
      assertEquals(a, Span.fromContext(other.current()));
      assertPublished(a, "a", null);
      try (Scope sb = st.attach(Context.root().with(b))) {
        assertEquals(b, Span.fromContext(other.current()));
        assertPublished(b, "b", null);
      }
      assertPublished(a, "a", null);
    }
    assertEquals(null, other.current());
    assertEquals(0, NativeLib.slot());
    assertTrue(SpanprofThreadContext.stats().storageKeepsContext(), "the installed storage is still the one keeping it");
  }

  @Test
  void aSpanThatThrowsPublishesNullAndIsCounted() {
    Span bad = (Span) java.lang.reflect.Proxy.newProxyInstance(Span.class.getClassLoader(), new Class<?>[] {Span.class},
        (proxy, m, args) -> {
          if (m.getName().equals("getSpanContext")) {
            throw new IllegalStateException("broken span");
          }
          if (m.getName().equals("equals")) {
            return proxy == args[0];
          }
          if (m.getName().equals("hashCode")) {
            return System.identityHashCode(proxy);
          }
          return java.lang.reflect.InvocationHandler.invokeDefault(proxy, m, args);
        });
    Span root = tracer.spanBuilder("root").startSpan();
    try (Scope a = root.makeCurrent()) {
      long errors = SpanprofThreadContext.stats().errors();
      try (Scope b = Context.current().with(bad).makeCurrent()) {
        assertEquals(0, NativeLib.slot(), "a switch that failed publishes NULL, not the parent's record");
        assertEquals(bad, Span.current(), "the application's attach happened");
      }
      assertEquals(errors + 1, SpanprofThreadContext.stats().errors());
      assertPublished(root, "root", null);
    }
  }

  @Test
  void hexIdsParseAsTheirValue() {
    java.util.Random rnd = new java.util.Random(4947);
    for (int i = 0; i < 10000; i++) {
      long v = i < 2 ? (i == 0 ? 0 : -1) : rnd.nextLong();
      String h = String.format("%016x", v);
      long hi = Long.parseUnsignedLong(h.substring(0, 8), 16);
      long lo = Long.parseUnsignedLong(h.substring(8), 16);
      assertEquals(hi, ThreadRecords.hex32(ByteBuffer.wrap(h.getBytes(StandardCharsets.US_ASCII), 0, 8).getLong()), h);
      assertEquals(lo, ThreadRecords.hex32(ByteBuffer.wrap(h.getBytes(StandardCharsets.US_ASCII), 8, 8).getLong()), h);
      String u = h.toUpperCase(java.util.Locale.ROOT);
      assertEquals(hi, ThreadRecords.hex32(ByteBuffer.wrap(u.getBytes(StandardCharsets.US_ASCII), 0, 8).getLong()), u);
    }
  }

  @Test
  void siblingsGetTheirOwnNameAndRoute() {
    siblingsGetTheirOwnNameAndRoute(tracer);
    siblingsGetTheirOwnNameAndRoute(started);
  }

  static void siblingsGetTheirOwnNameAndRoute(Tracer tracer) {
    assertTrue(SpanAttrs.unlockedName(), "this SDK's span name is read without its lock");
    String[] names = {"GET /a", "GET /a", "GET /b", "GET /a", "x", "GET /b", "GET /b"};
    String[] routes = {"/a", "/a", "/b", "/a2", null, "/b", null};
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < names.length; i++) {
        io.opentelemetry.api.trace.SpanBuilder b = tracer.spanBuilder(names[i]).setSpanKind(SpanKind.SERVER);
        if (routes[i] != null) {
          b.setAttribute(AttributeKey.stringKey("http.route"), routes[i]);
        }
        Span s = b.startSpan();
        try (Scope sc = s.makeCurrent()) {
          assertPublished(s, names[i], routes[i]);
        }
        // Renamed and routed before its next attach (at another level).
        s.updateName(names[i] + "!");
        s.setAttribute(AttributeKey.stringKey("http.route"), "/r" + i);
        try (Scope p = Context.root().with(tracer.spanBuilder("p").startSpan()).makeCurrent();
            Scope sc = s.makeCurrent()) {
          assertPublished(s, names[i] + "!", "/r" + i);
        }
        s.end();
      }
    }
  }

  @Test
  void longAndNonAsciiNamesAreCutOnACharacterBoundary() {
    String name = "é".repeat(200); // 400 bytes of UTF-8
    Span s = tracer.spanBuilder(name).startSpan();
    try (Scope sc = s.makeCurrent()) {
      String got = current().attrs.get(0);
      assertEquals("é".repeat(127), got, "cut to 254 bytes, whole characters");
    }
  }

  @Test
  void threadsHaveTheirOwnRecords() throws Exception {
    Span s = tracer.spanBuilder("main").startSpan();
    AtomicLong other = new AtomicLong(-1);
    try (Scope sc = s.makeCurrent()) {
      long mine = NativeLib.slot();
      Thread t = new Thread(() -> {
        Span o = tracer.spanBuilder("other").startSpan();
        try (Scope x = o.makeCurrent()) {
          assertPublished(o, "other", null);
          other.set(NativeLib.slot());
        }
      });
      t.start();
      t.join();
      assertNotEquals(0, other.get());
      assertNotEquals(mine, other.get());
      assertPublished(s, "main", null);
    }
  }

  @Test
  void virtualThreadsPublishNothingAndAreCounted() throws Exception {
    Method ofVirtual;
    try {
      ofVirtual = Thread.class.getMethod("ofVirtual");
    } catch (NoSuchMethodException e) {
      Assumptions.assumeTrue(false, "no virtual threads before Java 21, this is " + Runtime.version());
      return;
    }
    Object builder = ofVirtual.invoke(null);
    Method start = Class.forName("java.lang.Thread$Builder").getMethod("start", Runnable.class);
    long before = SpanprofThreadContext.stats().virtualThreadAttachesSkipped();
    AtomicLong seen = new AtomicLong(-1);
    Thread vt = (Thread) start.invoke(builder, (Runnable) () -> {
      Span o = tracer.spanBuilder("virtual").startSpan();
      try (Scope x = o.makeCurrent()) {
        seen.set(NativeLib.slot()); // the carrier's TLS, as a profiler sees it
      }
    });
    vt.join();
    assertEquals(0, seen.get(), "a virtual thread's span must not land in its carrier's record");
    assertEquals(before + 1, SpanprofThreadContext.stats().virtualThreadAttachesSkipped());
  }

  @Test
  void processContextIsMapped() throws Exception {
    Resource r = Resource.getDefault().merge(Resource.create(
        io.opentelemetry.api.common.Attributes.of(AttributeKey.stringKey("service.name"), "unit-test")));
    assertTrue(SpanprofThreadContext.publishProcessContext(r));
    String maps = Files.readString(Paths.get("/proc/self/maps"));
    assertTrue(maps.contains("OTEL_CTX"), "no OTEL_CTX mapping in /proc/self/maps");
    assertTrue(SpanprofThreadContext.stats().storageWrapped());
  }

  static Span server(Tracer t, String name, String route) {
    io.opentelemetry.api.trace.SpanBuilder b = t.spanBuilder(name).setSpanKind(SpanKind.SERVER);
    if (route != null) {
      b.setAttribute(AttributeKey.stringKey("http.route"), route);
    }
    return b.startSpan();
  }

  @Test
  void aRecordBuiltAtStartIsCopiedAsIs() {
    assertTrue(SpanAttrs.attrsTracked(), "this SDK's attribute writes are seen without its lock");
    Span s = server(started, "GET /built/{id}", "/built/{id}");
    assertEquals(s.getSpanContext(), ((ThreadRecords) SpanprofContextStorage.state()).startedForTest(), "no record built at start");
    try (Scope sc = s.makeCurrent()) {
      assertPublished(s, "GET /built/{id}", "/built/{id}");
    }
    SpanRecord kept = SpanRecord.entryForTest(s.getSpanContext().getSpanId());
    assertTrue(kept == null || kept.ctx != s.getSpanContext(), "the attach built the record again");
    assertTrue(SpanprofThreadContext.stats().recordsBuiltAtStart());
    Span i = started.spanBuilder("internal").setAttribute(AttributeKey.stringKey("http.route"), "/x").startSpan();
    try (Scope sc = i.makeCurrent()) {
      assertPublished(i, "internal", null);
    }
  }

  static void onThread(Runnable r) {
    java.util.concurrent.atomic.AtomicReference<Throwable> err = new java.util.concurrent.atomic.AtomicReference<>();
    Thread th = new Thread(() -> {
      try {
        r.run();
      } catch (Throwable e) {
        err.set(e);
      }
    });
    th.start();
    try {
      th.join();
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
    if (err.get() != null) {
      throw new AssertionError("on another thread", err.get());
    }
  }

  @Test
  void aRecordBuiltAtAnotherThreadsAttachIsSharedByTheNext() {
    Span s = server(started, "GET /shared", "/shared");
    String id = s.getSpanContext().getSpanId();
    onThread(() -> {
      try (Scope sc = s.makeCurrent()) {
        assertPublished(s, "GET /shared", "/shared");
      }
    });
    SpanRecord kept = SpanRecord.entryForTest(id);
    assertTrue(kept != null && kept.ctx == s.getSpanContext(), "the first attach on another thread kept no record");
    onThread(() -> {
      try (Scope sc = s.makeCurrent()) {
        assertPublished(s, "GET /shared", "/shared");
      }
    });
    assertEquals(kept, SpanRecord.entryForTest(id), "a third thread's attach built the record again");
  }

  @Test
  void aNameOrRouteSetAfterStartIsPublished() {
    for (Tracer t : new Tracer[] {started, tracer}) {
      // Renamed before its first attach.
      Span a = server(t, "GET", "/a");
      a.updateName("GET /a");
      try (Scope sc = a.makeCurrent()) {
        assertPublished(a, "GET /a", "/a");
      }
      // A route first set after start (no attribute at start).
      Span b = server(t, "GET /b", null);
      try (Scope sc = b.makeCurrent()) {
        assertPublished(b, "GET /b", null);
      }
      b.setAttribute(AttributeKey.stringKey("http.route"), "/b");
      try (Scope p = Context.root().with(t.spanBuilder("p").startSpan()).makeCurrent(); Scope sc = b.makeCurrent()) {
        assertPublished(b, "GET /b", "/b");
      }
      // A route overwritten, and another attribute written, name unchanged.
      Span c = server(t, "GET /c", "/c");
      c.setAttribute(AttributeKey.stringKey("http.route"), "/c/{id}");
      try (Scope sc = c.makeCurrent()) {
        assertPublished(c, "GET /c", "/c/{id}");
      }
      c.setAttribute(AttributeKey.stringKey("other"), "x");
      c.updateName(new String("GET /c")); // equal, not the same String
      try (Scope p = Context.root().with(t.spanBuilder("p").startSpan()).makeCurrent(); Scope sc = c.makeCurrent()) {
        assertPublished(c, "GET /c", "/c/{id}");
      }
      // Attached on another thread after a change made on this one.
      c.updateName("GET /c2");
      c.setAttribute(AttributeKey.stringKey("http.route"), "/c2");
      onThread(() -> {
        try (Scope sc = c.makeCurrent()) {
          assertPublished(c, "GET /c2", "/c2");
        }
      });
    }
  }

  @Test
  void aSpanAttachedAgainIsRepublishedUnlessItChanged() {
    for (Tracer t : new Tracer[] {started, tracer}) {
      Span s = server(t, "GET /r", "/r");
      long first;
      try (Scope a = s.makeCurrent()) {
        assertPublished(s, "GET /r", "/r");
        first = NativeLib.slot();
      }
      try (Scope a = s.makeCurrent()) {
        assertEquals(first, NativeLib.slot(), "unchanged: the same buffer republished");
      }
      s.updateName("GET /r2"); // at the same level: its buffer there is stale now
      try (Scope a = s.makeCurrent()) {
        assertPublished(s, "GET /r2", "/r");
      }
      s.setAttribute(AttributeKey.stringKey("http.route"), "/r2");
      try (Scope a = s.makeCurrent()) {
        assertPublished(s, "GET /r2", "/r2");
      }
      Span i = t.spanBuilder("i").startSpan();
      try (Scope a = i.makeCurrent()) {
        assertPublished(i, "i", null);
      }
      i.updateName("i2");
      try (Scope a = i.makeCurrent()) {
        assertPublished(i, "i2", null);
      }
    }
  }

  /** Ids whose last three span id digits are the same: every span takes one slot of the table. */
  static final class SameSlotIds implements io.opentelemetry.sdk.trace.IdGenerator {
    final java.util.Random rnd = new java.util.Random(4719);

    @Override
    public String generateSpanId() {
      return String.format("%013x", rnd.nextLong() & 0xFFFFFFFFFFFFFL | 1L << 48).substring(0, 13) + "abc";
    }

    @Override
    public String generateTraceId() {
      return String.format("%016x%016x", rnd.nextLong() | 1, rnd.nextLong());
    }
  }

  @Test
  void spansSharingASlotEachPublishTheirOwnRecord() {
    Tracer t = SdkTracerProvider.builder().setIdGenerator(new SameSlotIds())
        .addSpanProcessor(SpanprofThreadContext.spanProcessor()).build().get("test");
    List<Span> spans = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      spans.add(server(t, "GET /s" + i, "/s" + i));
    }
    assertEquals(SpanRecord.slot(spans.get(0).getSpanContext().getSpanId()),
        SpanRecord.slot(spans.get(5).getSpanContext().getSpanId()));
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < spans.size(); i++) {
        Span s = spans.get(i);
        try (Scope p = Context.root().with(t.spanBuilder("p" + i).startSpan()).makeCurrent(); Scope sc = s.makeCurrent()) {
          assertPublished(s, "GET /s" + i, "/s" + i);
        }
      }
    }
  }

  @Test
  void slotsSpreadRandomIds() {
    java.util.Random rnd = new java.util.Random(1);
    int[] n = new int[SpanRecord.SLOTS];
    for (int i = 0; i < 100000; i++) {
      n[SpanRecord.slot(String.format("%016x", rnd.nextLong()))]++;
    }
    for (int i = 0; i < n.length; i++) {
      assertTrue(n[i] > 0, "slot " + i + " never used");
    }
  }
}
