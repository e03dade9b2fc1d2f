"""A CPU-bound fixture with known Python call paths, for the unwinding test.

Usage: python3 -X perf pystack.py SECONDS THREADS_FILE

The main thread runs main_loop -> main_middle -> main_inner; a thread named
py-worker runs worker -> hot_loop -> middle -> inner. THREADS_FILE gets one
"TID NAME" line per thread before "ready PID" is printed.
"""

import os
import sys
import threading
import time


def inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return inner(n) + 1


def hot_loop(deadline):
    while time.monotonic() < deadline:
        middle(2000)


def worker(deadline, started):
    started.set()
    hot_loop(deadline)


def main_inner(n):
    s = 0
    for i in range(n):
        s ^= i
    return s


def main_middle(n):
    return main_inner(n) + 1


def main_loop(deadline):
    while time.monotonic() < deadline:
        main_middle(2000)


def main():
    seconds, threads_file = float(sys.argv[1]), sys.argv[2]
    deadline = time.monotonic() + seconds
    started = threading.Event()
    t = threading.Thread(target=worker, args=(deadline, started), name="py-worker")
    t.start()
    started.wait()
    with open(threads_file, "w") as f:
        f.write(f"{threading.get_native_id()} main\n{t.native_id} py-worker\n")
    print(f"ready {os.getpid()}", flush=True)
    main_loop(deadline)
    t.join()


if __name__ == "__main__":
    main()
