"""ddtrace spans of known CPU work on several threads, with the tracer's
own view of each span written down as ground truth.

    python ddwork.py OUT [--threads 3] [--seconds 6] [--gate]

--gate: print "pid N", wait for a line on stdin, and only then import
ddtrace (so its native extension is loaded while spanprof records);
OUT.loaded gets the times before and after that import, a line each. Without --gate ddtrace is
imported first and "pid N" printed after.

OUT: one line a span, "tid trace span start end function held released"
(ns, time.time_ns(); trace is ddtrace's 128-bit trace id in hex, span its
64-bit span id; start..end encloses the span's activation, held..released
lies inside it; function is the frame -X perf names the work by). OUT.names: "span name resource local_root_span" a span.
OUT.gaps: "tid from to" stretches where the thread had no active span.
"""
import argparse
import os
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--threads", type=int, default=3)
ap.add_argument("--seconds", type=float, default=6)
ap.add_argument("--gate", action="store_true")
args = ap.parse_args()

if args.gate:
    print(f"pid {os.getpid()}", flush=True)
    sys.stdin.readline()
    loaded = time.time_ns()
    with open(f"{args.out}.loaded", "w") as f:
        f.write(f"{loaded}\n")

from ddtrace.trace import tracer  # noqa: E402

if args.gate:
    with open(f"{args.out}.loaded", "a") as f:
        f.write(f"{time.time_ns()}\n")
if not args.gate:
    print(f"pid {os.getpid()}", flush=True)
    sys.stdin.readline()

lock = threading.Lock()
spans, names, gaps = [], [], []


def burn_root(ms):
    end = time.time_ns() + int(ms * 1e6)
    x = 0
    while time.time_ns() < end:
        x += 1
    return x


def burn_child(ms):
    end = time.time_ns() + int(ms * 1e6)
    x = 0
    while time.time_ns() < end:
        x += 1
    return x


def burn_gap(ms):
    end = time.time_ns() + int(ms * 1e6)
    x = 0
    while time.time_ns() < end:
        x += 1
    return x


# The frame CPython's perf trampoline (-X perf) names a function by.
SCRIPT = os.path.abspath(__file__)


def note(tid, span, start, end, fn, held, released):
    # The tracer's own view: its trace id (128 bits) and span id.
    with lock:
        spans.append(f"{tid} {span.trace_id:032x} {span.span_id:016x} {start} {end} py::{fn}:{SCRIPT} {held} {released}")
        names.append(f"{span.span_id:016x}\t{span.name}\t{span.resource}\t{span._local_root.span_id:016x}")


def worker(k):
    tid = threading.get_native_id()
    deadline = time.time() + args.seconds
    i = 0
    while time.time() < deadline:
        g0 = time.time_ns()
        burn_gap(3)
        g1 = time.time_ns()
        a0 = time.time_ns()
        with tracer.trace(f"work.root{k}", resource=f"GET /r{k}/{i % 3}", service="ddwork") as root:
            a1 = time.time_ns()
            burn_root(8)
            a2 = time.time_ns()
            with tracer.trace(f"work.child{k}", resource=f"child{k}") as child:
                b1 = time.time_ns()
                burn_child(8)
                b2 = time.time_ns()
            c1 = time.time_ns()
            burn_root(4)
            c2 = time.time_ns()
        d = time.time_ns()
        note(tid, child, a2, c1, "burn_child", b1, b2)
        # The root's own stretches, before and after its child.
        note(tid, root, a0, b1, "burn_root", a1, a2)
        note(tid, root, b2, d, "burn_root", c1, c2)
        with lock:
            gaps.append(f"{tid} {g0} {g1}")
        i += 1


threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.threads)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(args.out, "w") as f:
    f.write("\n".join(spans) + "\n")
with open(f"{args.out}.names", "w") as f:
    f.write("\n".join(names) + "\n")
with open(f"{args.out}.gaps", "w") as f:
    f.write("\n".join(gaps) + "\n")
