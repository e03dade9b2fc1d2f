package dev.spanprof.otel;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;

/** Thread facts this release-17 build cannot ask directly (Thread#isVirtual is Java 21). */
final class Threads {
  private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

  private Threads() {}

  private static MethodHandle isVirtualHandle() {
    try {
      return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual", MethodType.methodType(boolean.class));
    } catch (NoSuchMethodException | IllegalAccessException e) {
      return null; // before Java 21: no virtual threads
    }
  }

  static boolean isVirtual(Thread t) {
    if (IS_VIRTUAL == null) {
      return false;
    }
    try {
      return (boolean) IS_VIRTUAL.invokeExact(t);
    } catch (Throwable e) {
      throw new IllegalStateException("Thread.isVirtual", e);
    }
  }
}
