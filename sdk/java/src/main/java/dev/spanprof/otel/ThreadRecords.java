package dev.spanprof.otel;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * One platform thread's thread-context records: sdk/c's per-thread buffers (levels x 2 records of
 * 640 bytes, reached through a direct ByteBuffer) and the thread's TLS slot, set up once through
 * JNI. Publishing is plain Java stores; only the owning thread calls these methods.
 *
 * <p>A record is never modified while published: each nesting level has two buffers and a change
 * fills one that is not the published one, then stores the pointer with release ordering, so a
 * sample taken at any instant (the profiler reads from the thread's own interrupt context) sees
 * a whole record. Every buffer write bumps the buffer's generation; a scope restores the record it
 * saw only when that generation is unchanged, so a scope closed out of order, or a level reused
 * past the nesting depth, publishes NULL rather than another span's record.
 */
final class ThreadRecords {
  static final int LEVELS = 8; // sdk/c OTEL_THREAD_CTX_MAX_DEPTH
  static final int RECORD = 640;
  static final int ATTRS_MAX = RECORD - 28;
  static final int MAX_VALUE = 255;

  // A span's record is written in place: at its start into the buffer its
  // attach will publish (the header's stores, and the attribute bytes
  // unless that buffer holds them already), or at an attach copied in one
  // bulk put from SpanRecord's heap array.
  private static final VarHandle LONG_BE =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
  private static final VarHandle SLOT =
      MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.nativeOrder());
  private static final VarHandle SHORT_HOST =
      MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.nativeOrder());
  final Thread owner;
  private final ByteBuffer recs;
  private final ByteBuffer slot;
  private final long base;
  /** The span whose record each buffer holds (null: none), to republish without rewriting. */
  private final Span[] holder = new Span[LEVELS * 2];
  private final int[] gen = new int[LEVELS * 2];
  /** The last trace id parsed: the SDK hands a trace's spans the same String. */
  private String lastTrace;
  private long traceHi;
  private long traceLo;
  /** The ids' hex digits, copied here to be parsed eight at a time. */
  private final byte[] hex = new byte[48];
  /**
   * A header built on the heap, then copied into the direct buffer in one bulk put. Six stores
   * straight into the buffer each go through the buffer's memory-session checks, which C2 does
   * not always inline where the span processor is itself inlined deep in the SDK's startSpan:
   * in the slower JVMs of Java 25 they stayed calls (BENCHMARKS.md).
   */
  private final byte[] hdr = new byte[28];
  /**
   * The buffer holding the record of the span last started on this thread (span processor),
   * written there at its start for its first attach; -1: none.
   */
  private int prepared = -1;
  /** The name, kind and attribute writes of the SDK span whose record each buffer holds (name null: ids only). */
  private final String[] heldName = new String[LEVELS * 2];
  private final boolean[] heldServer = new boolean[LEVELS * 2];
  private final int[] heldWrites = new int[LEVELS * 2];
  /**
   * The attribute encoding (SpanRecord.attrs's shared array, never changed) whose bytes follow
   * each buffer's header, null when unknown, and each buffer's record length: a record of the
   * same name and route then rewrites only the 28-byte header.
   */
  private final byte[][] heldAttrs = new byte[LEVELS * 2][];
  private final int[] heldLen = new int[LEVELS * 2];
  /** Open levels; may exceed LEVELS (the deepest level is then reused). */
  int depth;
  /** The published buffer, -1 for NULL. */
  int published = -1;

  private ThreadRecords(Thread owner, ByteBuffer recs, ByteBuffer slot, long base) {
    this.owner = owner;
    this.recs = recs;
    this.slot = slot;
    this.base = base;
  }

  /** Sets the calling thread up through JNI; null when the library refuses (out of memory). */
  static ThreadRecords setUp() {
    ByteBuffer[] out = new ByteBuffer[2];
    long base = NativeLib.setupThread(out);
    if (base == 0 || out[0] == null || out[1] == null) {
      return null;
    }
    return new ThreadRecords(Thread.currentThread(), out[0], out[1], base);
  }

  /** The generation of buffer i (-1: NULL, generation 0). */
  int generation(int i) {
    return i < 0 ? 0 : gen[i];
  }

  /** Enters a level publishing span's record (NULL for a null or invalid span). */
  void enter(Span span) {
    int lvl = depth < LEVELS ? depth : LEVELS - 1;
    depth++;
    if (span == null) {
      publish(-1);
      return;
    }
    int a = lvl * 2;
    int b = a + 1;
    // The span's record may still be in a buffer of this level (the same
    // span attached again, or a sibling scope of it): republish it as is,
    // unless the span was renamed or its attributes written since.
    if (holder[a] == span && unchanged(a, span)) {
      publish(a);
      return;
    }
    if (holder[b] == span && unchanged(b, span)) {
      publish(b);
      return;
    }
    SpanContext sc = span.getSpanContext();
    // A remote span context (a propagated parent attached before the
    // server span starts) is another process's span: this thread runs no
    // span of its own, and linking its samples there would put this
    // service's CPU time on the caller's span.
    if (!sc.isValid() || sc.isRemote()) {
      publish(-1);
      return;
    }
    int w = fill(a, b);
    // An SDK span's record is built once (at its start, in a buffer of
    // the level where its attach usually comes, found above; or at the
    // first attach that finds none) and copied whole; other spans get ids
    // only.
    gen[w]++;
    holder[w] = null; // until the record is whole: a write that throws leaves nothing to republish
    int p = prepared;
    if (p >= 0 && holder[p] == span && unchanged(p, span)) {
      // Started here, attached at another level: copied from its buffer.
      recs.put(w * RECORD, recs, p * RECORD, heldLen[p]);
      held(w, heldName[p], heldServer[p], heldWrites[p]);
      heldAttrs[w] = heldAttrs[p];
      heldLen[w] = heldLen[p];
    } else {
      SpanRecord rec = SpanRecord.find(span, sc);
      if (rec == null) {
        rec = SpanRecord.build(span, sc);
      }
      heldAttrs[w] = null;
      if (rec != null) {
        recs.put(w * RECORD, rec.rec, 0, rec.len);
        held(w, rec.name, rec.server, rec.attrWrites);
      } else {
        writeIds(w, sc);
        heldName[w] = null;
      }
    }
    holder[w] = span;
    publish(w);
  }

  /**
   * The buffer of a level's two (a, b) to write: the one the reader cannot be looking at; of two
   * unpublished, the older, so a recently restored record survives longest.
   */
  private int fill(int a, int b) {
    return published == a ? b : published == b ? a : (gen[a] <= gen[b] ? a : b);
  }

  private void held(int i, String name, boolean server, int writes) {
    heldName[i] = name;
    heldServer[i] = server;
    heldWrites[i] = writes;
  }

  /** Whether buffer i's span is as it was when its record was written (always, for ids only). */
  private boolean unchanged(int i, Span span) {
    String n = heldName[i];
    return n == null || SpanRecord.unchanged(span, n, heldServer[i], heldWrites[i]);
  }

  /**
   * Builds the record of an SDK span starting on this thread (the span processor, in the SDK's
   * startSpan: no other thread has the span yet), for its first attach here: in the buffer that
   * attach fills when it comes next at this depth, as {@link #enter} would (never the published
   * one, its generation bumped), where enter finds it held by the span and only publishes it.
   */
  void started(Span span, SpanContext sc) {
    prepared = -1;
    String name = SpanAttrs.name(span);
    if (name == null) {
      return;
    }
    boolean server = SpanAttrs.isServer(span);
    int writes = -1;
    String route = null;
    if (server) {
      writes = SpanAttrs.attrWrites(span);
      route = SpanAttrs.routeUnlocked(span);
    }
    byte[] attrs = SpanRecord.attrs(name, route);
    int lvl = depth < LEVELS ? depth : LEVELS - 1;
    int w = fill(lvl * 2, lvl * 2 + 1);
    gen[w]++;
    holder[w] = null; // until the record is whole
    int off = w * RECORD;
    if (heldAttrs[w] != attrs) {
      heldAttrs[w] = null;
      recs.put(off + 28, attrs, 0, attrs.length);
      heldAttrs[w] = attrs;
    }
    header(off, sc, attrs.length);
    held(w, name, server, writes);
    heldLen[w] = 28 + attrs.length;
    holder[w] = span;
    prepared = w;
  }

  /** The SpanContext of the record built at the last span start here, null for none (tests). */
  SpanContext startedForTest() {
    int p = prepared;
    return p < 0 || holder[p] == null ? null : holder[p].getSpanContext();
  }

  /** Writes a record's 28-byte header (ids, valid, flags, attribute size) at off, in place. */
  @SuppressWarnings("deprecation") // getBytes(int, int, byte[], int): a plain copy of ASCII
  private void header(int off, SpanContext sc, int attrLen) {
    String t = sc.getTraceId();
    byte[] h = hex;
    if (t != lastTrace) {
      // All digits copied first, then parsed: a read of eight bytes just
      // written by the copy would wait on it, where a later one need not.
      t.getBytes(0, 32, h, 0);
      sc.getSpanId().getBytes(0, 16, h, 32);
      traceHi = hex64(h, 0);
      traceLo = hex64(h, 16);
      lastTrace = t;
    } else {
      sc.getSpanId().getBytes(0, 16, h, 32);
    }
    putHeader(hdr, traceHi, traceLo, hex64(h, 32), sc.getTraceFlags().asByte(), attrLen);
    recs.put(off, hdr, 0, 28);
  }

  /**
   * Writes a record's 28-byte header at b[0]: the ids (big-endian), valid, flags and the
   * attributes' size (host order).
   */
  static void putHeader(byte[] b, long traceHi, long traceLo, long spanId, byte flags, int attrLen) {
    LONG_BE.set(b, 0, traceHi);
    LONG_BE.set(b, 8, traceLo);
    LONG_BE.set(b, 16, spanId);
    b[24] = 1;
    b[25] = flags;
    SHORT_HOST.set(b, 26, (short) attrLen);
  }

  /** Restores the state a scope saw before its attach. */
  void restore(int beforeDepth, int beforeIdx, int beforeGen) {
    depth = beforeDepth;
    if (beforeIdx >= 0 && gen[beforeIdx] != beforeGen) {
      publish(-1);
      SpanprofThreadContext.STATS.lostRestores.increment();
      return;
    }
    publish(beforeIdx);
  }

  /** Publishes NULL (a switch that failed). */
  void clear() {
    publish(-1);
  }

  private void publish(int i) {
    // Release: the record's bytes are visible before the pointer is.
    SLOT.setRelease(slot, 0, i < 0 ? 0L : base + (long) i * RECORD);
    published = i;
  }

  /** A record of ids and flags, no attributes (a span that is not the SDK's). */
  private void writeIds(int i, SpanContext sc) {
    header(i * RECORD, sc, 0);
    heldLen[i] = 28;
  }

  /** Parses 16 hex digits at b[at] (valid ids are lowercase hex, SpanContext checks). */
  static long hex64(byte[] b, int at) {
    return (hex32((long) LONG_BE.get(b, at)) << 32) | hex32((long) LONG_BE.get(b, at + 8));
  }

  /** Eight ASCII hex digits, the first in the top byte, to their 32-bit value (no lookups, no branches). */
  static long hex32(long x) {
    // '0'-'9' are 0x30-0x39, 'a'-'f' 0x61-0x66, 'A'-'F' 0x41-0x46: the low
    // nibble, plus 9 for a letter (bit 6 set).
    long v = (x & 0x0F0F0F0F0F0F0F0FL) + ((x >>> 6) & 0x0101010101010101L) * 9;
    v = (v | (v >>> 4)) & 0x00FF00FF00FF00FFL;
    v = (v | (v >>> 8)) & 0x0000FFFF0000FFFFL;
    return (v | (v >>> 16)) & 0xFFFFFFFFL;
  }

  /** Appends {key, len, value} at pos (UTF-8, cut to 255 bytes on a character boundary); returns the bytes used, 0 when it does not fit. */
  static int putAttr(byte[] b, int pos, int room, int key, String v) {
    if (v == null || room < 2) {
      return 0;
    }
    int max = Math.min(MAX_VALUE, room - 2);
    int n = 0;
    int len = v.length();
    for (int i = 0; i < len; i++) {
      char c = v.charAt(i);
      if (c < 0x80) {
        if (n + 1 > max) {
          break;
        }
        b[pos + 2 + n++] = (byte) c;
        continue;
      }
      int cp = v.codePointAt(i);
      int w = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      if (Character.isSurrogate(c) && w != 4) {
        cp = 0xFFFD; // a lone surrogate: the replacement character
        w = 3;
      }
      if (n + w > max) {
        break;
      }
      int p = pos + 2 + n;
      if (w == 2) {
        b[p] = (byte) (0xC0 | (cp >> 6));
      } else if (w == 3) {
        b[p] = (byte) (0xE0 | (cp >> 12));
        b[p + 1] = (byte) (0x80 | ((cp >> 6) & 0x3F));
      } else {
        b[p] = (byte) (0xF0 | (cp >> 18));
        b[p + 1] = (byte) (0x80 | ((cp >> 12) & 0x3F));
        b[p + 2] = (byte) (0x80 | ((cp >> 6) & 0x3F));
        i++; // the low surrogate
      }
      b[p + w - 1] = (byte) (0x80 | (cp & 0x3F));
      n += w;
    }
    b[pos] = (byte) key;
    b[pos + 1] = (byte) n;
    return n + 2;
  }
}
