package dev.spanprof.otel;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import java.util.Arrays;

/**
 * An SDK span's whole record (the 28-byte header and its attributes) built once, so that its
 * attaches on every thread copy it in one bulk put: no hex parsing, no encoding, no span lock.
 *
 * <p>At span start {@link SpanprofSpanProcessor} (where the span is still the starting thread's
 * alone, so its http.route is read without the lock) builds the record in the starting thread's
 * {@link ThreadRecords}, where the span's first attach (usually next, on that thread) finds it:
 * nothing is allocated for it (but a new encoding of a name and route not seen last). A span
 * attached first elsewhere, or after another span started on its thread, has its record built
 * at that attach and kept in a process-wide table of {@link #SLOTS} entries
 * indexed by the span id's last digits, for its attaches on any thread. (Records built at every
 * start are not put there: kept for the few milliseconds until another span takes the slot, they
 * would outlive young collections.) A record is used only for the very SpanContext it was built
 * for, and only while the span's name and attributes are the ones it was built from (same name
 * String, same count of attribute writes), so a span renamed or given a route after the record
 * was built gets a new one. An entry is immutable and published by a plain array store: its final fields (and
 * the bytes they reach, written before construction ends) are seen whole by any thread.
 *
 * <p>The table keeps, per slot, the SpanContext, the name and the encoded bytes of one span (at
 * most 4096 spans, about 300 bytes each with the SpanContext's strings), until another span takes
 * the slot.
 */
final class SpanRecord {
  static final int SLOTS = 4096;
  private static final SpanRecord[] TABLE = new SpanRecord[SLOTS];
  /** The last attribute encodings built, by the name's length: spans of one endpoint share them. */
  private static final Encoded[] ENCODED = new Encoded[32];

  final SpanContext ctx;
  /** The name the record holds (compared by identity: a renamed span has another String). */
  final String name;
  /** Server spans only: the attribute writes counted when http.route was read, -1 for none yet. */
  final int attrWrites;
  final boolean server;
  /** The record: its first len bytes are copied (32 spare bytes follow, used to parse the ids). */
  final byte[] rec;
  final int len;

  private SpanRecord(SpanContext ctx, String name, boolean server, int attrWrites, byte[] rec, int len) {
    this.ctx = ctx;
    this.name = name;
    this.server = server;
    this.attrWrites = attrWrites;
    this.rec = rec;
    this.len = len;
  }

  /** A name and route's attribute bytes (keys 0 and 1), shared by the records that have them. */
  private static final class Encoded {
    final String name;
    final String route;
    final byte[] attrs;

    Encoded(String name, String route, byte[] attrs) {
      this.name = name;
      this.route = route;
      this.attrs = attrs;
    }
  }

  /** The slot of a span id (16 hex digits, random): its last three digits. */
  static int slot(String spanId) {
    return nibble(spanId.charAt(15)) | nibble(spanId.charAt(14)) << 4 | nibble(spanId.charAt(13)) << 8;
  }

  private static int nibble(char c) {
    return (c & 0xF) + ((c >> 6) & 1) * 9;
  }

  /**
   * The record of an SDK span attached now, if one was built and the span's name and attributes
   * are still those it was built from; else null.
   */
  static SpanRecord find(Span span, SpanContext sc) {
    SpanRecord r = TABLE[slot(sc.getSpanId())];
    return r != null && r.ctx == sc && r.matches(span) ? r : null;
  }

  /** Whether the span (this record's) still has the name and attributes the record was built from. */
  boolean matches(Span span) {
    return unchanged(span, name, server, attrWrites);
  }

  /** Whether an SDK span's name is still that String and, for a server span, its attribute writes that count. */
  static boolean unchanged(Span span, String name, boolean server, int attrWrites) {
    if (SpanAttrs.name(span) != name) {
      return false;
    }
    if (server) {
      int w = SpanAttrs.attrWrites(span);
      return w == attrWrites && w != Integer.MIN_VALUE;
    }
    return true;
  }

  /**
   * Builds an SDK span's record at an attach (null when the span is not the SDK's) and keeps it
   * in the table; http.route is read under the span's lock.
   */
  static SpanRecord build(Span span, SpanContext sc) {
    String name = SpanAttrs.name(span);
    if (name == null) {
      return null;
    }
    boolean server = SpanAttrs.isServer(span);
    int writes = -1;
    String route = null;
    if (server) {
      // The count first: a write racing with the read below then makes
      // the count differ at the next attach, which builds again.
      writes = SpanAttrs.attrWrites(span);
      route = SpanAttrs.route(span);
    }
    byte[] attrs = attrs(name, route);
    int len = 28 + attrs.length;
    byte[] rec = new byte[len + 32];
    System.arraycopy(attrs, 0, rec, 28, attrs.length);
    header(sc, rec, len, attrs.length);
    SpanRecord r = new SpanRecord(sc, name, server, writes, rec, len);
    TABLE[slot(sc.getSpanId())] = r;
    return r;
  }

  /** The attribute bytes of a name and route, from the shared encodings when one matches. */
  static byte[] attrs(String name, String route) {
    int i = (name.length() ^ (route == null ? 0 : route.length() << 2)) & (ENCODED.length - 1);
    Encoded e = ENCODED[i];
    if (e != null && (e.name == name || e.name.equals(name))
        && (e.route == route || (route != null && route.equals(e.route)))) {
      return e.attrs;
    }
    byte[] b = new byte[ThreadRecords.ATTRS_MAX];
    int n = SpanAttrs.encode(name, route, b, 0);
    byte[] a = Arrays.copyOf(b, n);
    ENCODED[i] = new Encoded(name, route, a);
    return a;
  }

  /** The header: ids (hex parsed in the spare bytes at tail), valid, flags, attributes' size. */
  @SuppressWarnings("deprecation") // getBytes(int, int, byte[], int): a plain copy of ASCII
  static void header(SpanContext sc, byte[] rec, int tail, int attrLen) {
    // The digits copied first, then parsed (as ThreadRecords.header).
    sc.getTraceId().getBytes(0, 32, rec, tail);
    long hi = ThreadRecords.hex64(rec, tail);
    long lo = ThreadRecords.hex64(rec, tail + 16);
    sc.getSpanId().getBytes(0, 16, rec, tail);
    long s = ThreadRecords.hex64(rec, tail);
    ThreadRecords.putHeader(rec, hi, lo, s, sc.getTraceFlags().asByte(), attrLen);
  }

  /** Empties the table (tests). */
  static void clearForTest() {
    Arrays.fill(TABLE, null);
    Arrays.fill(ENCODED, null);
  }

  /** The table's entry for a span id (tests). */
  static SpanRecord entryForTest(String spanId) {
    return TABLE[slot(spanId)];
  }
}
