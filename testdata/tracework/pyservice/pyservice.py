"""pyservice: the Python side of the polyglot trace example
(test/trace TestThreeServicesPolyglot). A Flask service on loopback, run
under opentelemetry-instrument, whose Flask instrumentation makes the
server span from the W3C traceparent header. The service uses the
OpenTelemetry API alone, for its inner spans of known work; it knows
nothing of the profiler.

For "GET /work?cpu_ms=N&sleep_ms=M" it runs

    python cpu     burns N ms of thread CPU time
    python sleep   time.sleep(M)

and prints per span "truth TRACE_ID SPAN_ID NAME TID START_NS END_NS
CPU_NS WAIT_NS RUN_NS": the native thread id, the wall-clock bounds of the
work inside the span, the thread CPU time it took, the rest of its wall
time (a wait), and the time it was current on a CPU (RUN_NS, the monotonic
clock less the thread's run_delay in /proc/thread-self/schedstat; 0 for a
wait, and 0 for a burst that blocked, for the GIL say, where that clock would
count the blocked time: its CPU_NS is then the truth). Prints "ready PID PORT" once listening; serves until stdin closes.
"""

import os
import sys
import threading
import time

from flask import Flask, request
from opentelemetry import trace
from werkzeug.serving import make_server

app = Flask(__name__)
tracer = trace.get_tracer("pyservice")


def running():
    with open("/proc/thread-self/schedstat") as f:
        delay = int(f.read().split()[1])
    return time.monotonic_ns() - delay


def voluntary():
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split(":")[1])
    raise RuntimeError("no voluntary_ctxt_switches in /proc/thread-self/status")


def burn(ns):
    start = time.thread_time_ns()
    x = 1
    while time.thread_time_ns() - start < ns:
        for _ in range(2000):
            x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
    return x


def truth(span, name, tid, start, end, cpu, wait, run):
    ctx = span.get_span_context()
    print(f"truth {ctx.trace_id:032x} {ctx.span_id:016x} {name} {tid} {start} {end} {cpu} {wait} {run}", flush=True)


@app.route("/work")
def work():
    cpu_ms = int(request.args.get("cpu_ms", "0"))
    sleep_ms = int(request.args.get("sleep_ms", "0"))
    tid = threading.get_native_id()
    with tracer.start_as_current_span("python cpu") as s:
        start, c0, v0, r0 = time.time_ns(), time.thread_time_ns(), voluntary(), running()
        burn(cpu_ms * 1_000_000)
        cpu, run, end = time.thread_time_ns() - c0, running() - r0, time.time_ns()
        if voluntary() != v0:
            run = 0
        truth(s, "python-cpu", tid, start, end, cpu, 0, run)
    with tracer.start_as_current_span("python sleep") as s:
        start, c0 = time.time_ns(), time.thread_time_ns()
        time.sleep(sleep_ms / 1000)
        end, cpu = time.time_ns(), time.thread_time_ns() - c0
        truth(s, "python-sleep", tid, start, end, 0, end - start - cpu, 0)
    return "ok\n"


def main():
    server = make_server("127.0.0.1", 0, app, threaded=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"ready {os.getpid()} {server.server_port}", flush=True)
    try:
        sys.stdin.read()  # until stdin closes, or the harness's interrupt
    except KeyboardInterrupt:
        pass  # the harness stops services with SIGINT: a normal exit, no traceback
    server.shutdown()


if __name__ == "__main__":
    main()
