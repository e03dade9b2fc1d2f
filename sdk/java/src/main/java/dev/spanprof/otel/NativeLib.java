package dev.spanprof.otel;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The JNI library that owns the TLS variable {@code otel_thread_ctx_v1}. It is packaged in the jar
 * and loaded from a temporary copy: the dynamic loader needs a file, and a profiler reading the
 * process finds the library (and the variable's TLS offset) through /proc/PID/maps.
 */
final class NativeLib {
  private static final Logger log = Logger.getLogger(NativeLib.class.getName());
  private static final String NAME = "libspanprof_otel.so";

  /** Why the library is not loaded, or null when it is. */
  static final String unavailable = load();

  private NativeLib() {}

  static boolean loaded() {
    return unavailable == null;
  }

  private static String load() {
    String arch = System.getProperty("os.arch", "");
    if (!System.getProperty("os.name", "").equals("Linux")) {
      return "not Linux";
    }
    if (!arch.equals("amd64") && !arch.equals("x86_64")) {
      return "no JNI library built for " + arch + " (only linux-x86_64 is packaged)";
    }
    String res = "/native/linux-x86_64/" + NAME;
    // java.io.tmpdir first; a noexec mount there (common in containers)
    // makes dlopen fail, so the other usual writable places follow.
    StringBuilder why = new StringBuilder();
    for (String d : new String[] {System.getProperty("otel.spanprof.native.dir"), System.getProperty("java.io.tmpdir"), "/dev/shm", "/var/tmp"}) {
      if (d == null || d.isEmpty()) {
        continue;
      }
      try (InputStream in = NativeLib.class.getResourceAsStream(res)) {
        if (in == null) {
          return res + " missing from the jar";
        }
        Path dir = Files.createTempDirectory(Path.of(d), "spanprof-otel-");
        Path so = dir.resolve(NAME);
        // Kept while the JVM runs: the profiler opens the library by the
        // path in /proc/PID/maps to find the variable's TLS offset.
        dir.toFile().deleteOnExit();
        so.toFile().deleteOnExit();
        Files.copy(in, so, StandardCopyOption.REPLACE_EXISTING);
        System.load(so.toString());
        return null;
      } catch (IOException | UnsatisfiedLinkError | SecurityException | java.nio.file.InvalidPathException e) {
        why.append(why.length() == 0 ? "" : "; ").append(d).append(": ").append(e);
      }
    }
    log.log(Level.WARNING, "spanprof-otel: cannot load " + NAME + ", thread context not published: " + why);
    return why.toString();
  }

  /** Sets the calling thread up: out[0] = its records, out[1] = its TLS slot; returns 0 on failure. */
  static native long setupThread(ByteBuffer[] out);

  /** Publishes the process context (sdk/c otel_process_ctx_publish); returns 0 or an errno. */
  static native int publishProcess(byte[] attrs, byte[] keys);

  /** The calling thread's otel_thread_ctx_v1, as a reader sees it. */
  static native long slot();

  /** Copies dst.length bytes of the record at addr. */
  static native void peek(long addr, byte[] dst);
}
