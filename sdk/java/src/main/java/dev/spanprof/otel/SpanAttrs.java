package dev.spanprof.otel;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.sdk.trace.ReadableSpan;

/**
 * The record's attributes, by the process context's key map: key 0 the span's name, key 1 its
 * http.route (server spans). Only SDK spans (ReadableSpan) expose them; other spans get ids only.
 */
final class SpanAttrs {
  /** threadlocal.attribute_key_map: index = the attribute's key byte. */
  static final String[] KEYS = {"span.name", "http.route"};

  private static final AttributeKey<String> HTTP_ROUTE = AttributeKey.stringKey("http.route");
  private static final boolean SDK = sdkPresent();

  private SpanAttrs() {}

  private static boolean sdkPresent() {
    try {
      Class.forName("io.opentelemetry.sdk.trace.ReadableSpan", false, SpanAttrs.class.getClassLoader());
      return true;
    } catch (ClassNotFoundException | LinkageError e) {
      return false;
    }
  }

  /** Writes the attributes at pos; returns their size in bytes. */
  static int encode(Span span, byte[] b, int pos) {
    if (!SDK || !(span instanceof ReadableSpan)) {
      return 0;
    }
    ReadableSpan rs = (ReadableSpan) span;
    int n = ThreadRecords.putAttr(b, pos, ThreadRecords.ATTRS_MAX, 0, rs.getName());
    // http.route is a server span's attribute (semantic conventions); the
    // SDK takes a lock per attribute read, so other kinds skip it.
    if (rs.getKind() == SpanKind.SERVER) {
      n += ThreadRecords.putAttr(b, pos + n, ThreadRecords.ATTRS_MAX - n, 1, rs.getAttribute(HTTP_ROUTE));
    }
    return n;
  }
}
