// Hot runs known hot methods on named threads for the profiler's tests.
// Usage: java -XX:+PreserveFramePointer Hot THREADS [LATE_AFTER_MS]
// Threads "hot-worker-N" spin in Hot.work; after LATE_AFTER_MS (if given)
// threads "late-worker-N" start spinning in Hot.late, a method that was
// never run before, so it is compiled only then. Prints "ready" once the
// workers run.
public class Hot {
    static volatile long sink;

    static long work(long x) {
        for (int i = 0; i < 20000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 17;
        }
        return x;
    }

    static long late(long x) {
        for (int i = 0; i < 20000; i++) {
            x = x * 2862933555777941757L + 3037000493L;
            x ^= x >>> 23;
        }
        return x;
    }

    static void spin(boolean isLate) {
        long x = Thread.currentThread().getId();
        while (true) {
            x = isLate ? late(x) : work(x);
            sink = x;
        }
    }

    static void start(String name, boolean isLate) {
        Thread t = new Thread(() -> spin(isLate), name);
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        for (int i = 0; i < n; i++) start("hot-worker-" + i, false);
        System.out.println("ready");
        System.out.flush();
        if (args.length > 1) {
            Thread.sleep(Long.parseLong(args[1]));
            for (int i = 0; i < n; i++) start("late-worker-" + i, true);
            System.out.println("late");
            System.out.flush();
        }
        Thread.sleep(Long.MAX_VALUE);
    }
}
