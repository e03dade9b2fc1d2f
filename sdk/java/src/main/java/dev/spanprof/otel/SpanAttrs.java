package dev.spanprof.otel;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.sdk.trace.ReadableSpan;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The record's attributes, by the process context's key map: key 0 the span's name, key 1 its
 * http.route (server spans). Only SDK spans (ReadableSpan) expose them; other spans get ids only.
 */
final class SpanAttrs {
  /** threadlocal.attribute_key_map: index = the attribute's key byte. */
  static final String[] KEYS = {"span.name", "http.route"};

  private static final AttributeKey<String> HTTP_ROUTE = AttributeKey.stringKey("http.route");
  private static final boolean SDK = sdkPresent();
  /**
   * The SDK's span class and its name field, read without the span's lock (null when this SDK
   * has no such field: getName() then). ReadableSpan.getName() takes the span's lock for one
   * field read; a String is immutable, so an unlocked read sees the name as set by any write that
   * happened before the attach (the same thread's updateName, or one handed over with the span),
   * or one racing with it, which the lock would not order either.
   */
  private static final Class<?> SDK_SPAN;
  private static final VarHandle SDK_SPAN_NAME;
  /**
   * The SDK span's attribute map (null until its first attribute) and that map's count of
   * attribute writes (every put adds one, an overwrite too): null when this SDK has no such
   * fields. Read without the lock, they only tell whether the attributes changed since a record
   * was built; the route itself is read under the lock, or at span start, where no other thread
   * has the span yet.
   */
  private static final VarHandle SDK_SPAN_ATTRS;
  private static final VarHandle ATTRS_WRITES;

  static {
    Class<?> c = null;
    VarHandle h = null;
    VarHandle a = null;
    VarHandle w = null;
    if (SDK) {
      try {
        // Beside ReadableSpan, whatever its package is named in this class loader.
        c = Class.forName(ReadableSpan.class.getPackageName() + ".SdkSpan", false, ReadableSpan.class.getClassLoader());
        h = MethodHandles.privateLookupIn(c, MethodHandles.lookup()).findVarHandle(c, "name", String.class);
      } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
        c = null;
        h = null;
      }
      if (c != null) {
        try {
          Class<?> m = c.getDeclaredField("attributes").getType();
          if (Attributes.class.isAssignableFrom(m)) {
            a = MethodHandles.privateLookupIn(c, MethodHandles.lookup()).findVarHandle(c, "attributes", m);
            w = MethodHandles.privateLookupIn(m, MethodHandles.lookup()).findVarHandle(m, "totalAddedValues", int.class);
          }
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
          a = null;
          w = null;
        }
      }
    }
    SDK_SPAN = c;
    SDK_SPAN_NAME = h;
    SDK_SPAN_ATTRS = w == null ? null : a;
    ATTRS_WRITES = a == null ? null : w;
  }

  private SpanAttrs() {}

  private static boolean sdkPresent() {
    try {
      Class.forName("io.opentelemetry.sdk.trace.ReadableSpan", false, SpanAttrs.class.getClassLoader());
      return true;
    } catch (ClassNotFoundException | LinkageError e) {
      return false;
    }
  }

  /** Whether the SDK span's name is read without its lock (tests). */
  static boolean unlockedName() {
    return SDK_SPAN_NAME != null;
  }

  /** Whether a server span's attribute changes are seen without its lock (tests). */
  static boolean attrsTracked() {
    return ATTRS_WRITES != null;
  }

  /** Whether the SDK span is a server span (its http.route is read). */
  static boolean isServer(Span span) {
    return ((ReadableSpan) span).getKind() == SpanKind.SERVER;
  }

  /**
   * The count of attribute writes to an SDK span, -1 before its first; MIN_VALUE when they are not
   * tracked (never equal to another read: {@link SpanRecord#find} then builds again).
   */
  static int attrWrites(Span span) {
    if (ATTRS_WRITES == null || span.getClass() != SDK_SPAN) {
      return Integer.MIN_VALUE;
    }
    Object m = SDK_SPAN_ATTRS.get(span);
    return m == null ? -1 : (int) ATTRS_WRITES.get(m);
  }

  /**
   * A server span's http.route read without the span's lock: only where no other thread can be
   * writing its attributes (span start, in the SDK's startSpan).
   */
  static String routeUnlocked(Span span) {
    if (SDK_SPAN_ATTRS == null || span.getClass() != SDK_SPAN) {
      return route(span);
    }
    Object m = SDK_SPAN_ATTRS.get(span);
    return m == null ? null : ((Attributes) m).get(HTTP_ROUTE);
  }

  /** The span's name, null for a span that is not the SDK's. */
  static String name(Span span) {
    if (!SDK) {
      return null;
    }
    if (SDK_SPAN_NAME != null && span.getClass() == SDK_SPAN) {
      return (String) SDK_SPAN_NAME.get(span);
    }
    return span instanceof ReadableSpan ? ((ReadableSpan) span).getName() : null;
  }

  /**
   * The span's http.route, a server span's attribute (semantic conventions): null for other kinds,
   * which skip the read (the SDK takes its span lock for it). Only for an SDK span.
   */
  static String route(Span span) {
    ReadableSpan rs = (ReadableSpan) span;
    return rs.getKind() == SpanKind.SERVER ? rs.getAttribute(HTTP_ROUTE) : null;
  }

  /** Writes the attributes at pos (none when name is null); returns their size in bytes. */
  static int encode(String name, String route, byte[] b, int pos) {
    if (name == null) {
      return 0;
    }
    int n = ThreadRecords.putAttr(b, pos, ThreadRecords.ATTRS_MAX, 0, name);
    n += ThreadRecords.putAttr(b, pos + n, ThreadRecords.ATTRS_MAX - n, 1, route);
    return n;
  }
}
