"""Known CPU work in OpenTelemetry spans, for the spanprof Python SDK test.

Run with OTEL_PYTHON_CONTEXT=spanprof. The app uses the OpenTelemetry API;
with --sdk it sets up the SDK's TracerProvider itself, else it expects
opentelemetry-instrument to have done so. It imports no spanprof module.

Threads run spans (a parent with a nested child, work outside spans between
them); an asyncio loop thread runs interleaved tasks, each in its own span,
with CPU bursts between awaits. Until SIGTERM; then it writes, per burst,
"tid trace span start end function held released" (ns, time.time_ns():
start..end encloses the time the thread's record may carry the span,
held..released lies inside it) to OUT.sync and OUT.asyncio, and
"span name route" to OUT.names.

    python spanwork.py OUT [--sdk] [--threads 3] [--tasks 4] [--gate --duration S]

--gate: print the pid first, wait for a line on stdin, and only then import
OpenTelemetry (which dlopens the SDK's extension: a late load while the
profiler is already watching), writing the import's end time to
OUT.loaded; then run for S seconds and exit.
"""

import argparse
import asyncio
import os
import signal
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--sdk", action="store_true")
ap.add_argument("--threads", type=int, default=3)
ap.add_argument("--tasks", type=int, default=4)
ap.add_argument("--gate", action="store_true")
ap.add_argument("--duration", type=float, default=0)
args = ap.parse_args()
if args.gate:
    print(f"pid {os.getpid()}", flush=True)
    sys.stdin.readline()

from opentelemetry import context, trace  # noqa: E402

if args.gate:
    with open(f"{args.out}.loaded", "w") as f:
        f.write(f"{time.time_ns()}\n")

if args.sdk:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "spanwork-sdk"})))

rc = type(context._RUNTIME_CONTEXT).__name__
if rc != "SpanprofRuntimeContext":
    sys.exit(f"spanwork: runtime context is {rc}, want SpanprofRuntimeContext (OTEL_PYTHON_CONTEXT=spanprof)")
if type(trace.get_tracer_provider()).__module__ != "opentelemetry.sdk.trace":
    sys.exit(f"spanwork: tracer provider is {type(trace.get_tracer_provider())}, want the SDK's")

tracer = trace.get_tracer("spanwork")
stop = threading.Event()
lock = threading.Lock()
truth = {"sync": [], "asyncio": []}
names = {}


def burn(ms):
    end = time.time_ns() + int(ms * 1e6)
    x = 0
    while time.time_ns() < end:
        for i in range(50):
            x += i * i
    return x


def ids(span):
    c = span.get_span_context()
    return f"{c.trace_id:032x}", f"{c.span_id:016x}"


def note(kind, tid, span, start, end, held, released, fn):
    t, s = ids(span)
    with lock:
        truth[kind].append(f"{tid} {t} {s} {start} {end} {fn} {held} {released}")


def name(span, n, route):
    with lock:
        names[ids(span)[1]] = (n, route or "-")


def worker(k):
    tid = threading.get_native_id()
    i = 0
    while not stop.is_set():
        i += 1
        burn(1.5)  # outside any span: samples here carry no link
        route = f"/work/{k}/{{id}}" if i % 2 else None
        pname = f"parent-{k}-{i}"
        a0 = time.time_ns()
        with tracer.start_as_current_span(pname, attributes={"http.route": route} if route else None) as p:
            a1 = time.time_ns()
            burn(3)
            a2 = time.time_ns()
            with tracer.start_as_current_span(f"child-{k}-{i}") as c:
                b1 = time.time_ns()
                burn(3)
                b2 = time.time_ns()
            c1 = time.time_ns()
            burn(2)
            c2 = time.time_ns()
        d = time.time_ns()
        note("sync", tid, p, a0, b1, a1, a2, "burn")
        note("sync", tid, c, a2, c1, b1, b2, "burn")
        note("sync", tid, p, b2, d, c1, c2, "burn")
        name(p, pname, route)
        name(c, f"child-{k}-{i}", None)


async def task(k):
    tid = threading.get_native_id()
    i = 0
    while not stop.is_set():
        i += 1
        burn(1)  # in the task but outside a span
        await asyncio.sleep(0)
        sname = f"task-{k}-{i}"
        route = f"/task/{k}" if i % 2 else None
        with tracer.start_as_current_span(sname, attributes={"http.route": route} if route else None) as s:
            marks = []
            for _ in range(4):
                # After the first, each burst starts a step of this task:
                # the loop published the span when it began running the
                # task's handle, a few µs before h.
                h = time.time_ns()
                burn(2)
                r = time.time_ns()
                await asyncio.sleep(0)  # other tasks' spans run here
                marks.append((h, r, time.time_ns()))
        # The bursts, where the link is required; the step windows
        # (_timed_run) cover the loop's code around them.
        for h, r, _ in marks:
            note("asyncio", tid, s, h, r, h, r, "burn")
        name(s, sname, route)
        await asyncio.sleep(0)


async def tasks():
    ts = [asyncio.create_task(task(k)) for k in range(args.tasks)]
    while not stop.is_set():
        await asyncio.sleep(0.05)
    await asyncio.gather(*ts)


# Ground truth of the task steps: the span a step's context holds is
# published while the loop runs the step's handle, from before the task's
# code resumes (the GIL may be waited for there) until after it yielded
# (scheduling the next step), which the task cannot timestamp. This wrapper
# around the SDK's Handle._run records each handle's wall-clock window with
# the spans its context holds at the start and at the end (an attach or
# detach inside a step changes it), as windows where a link is right and
# none is required.
_inner_run = asyncio.events.Handle.__dict__["_run"]


def _step_spans(ctx):
    c = ctx.run(trace.get_current_span).get_span_context()
    return (c.trace_id, c.span_id) if c.is_valid else None


def _timed_run(handle):
    before = _step_spans(handle._context)
    t0 = time.time_ns()
    try:
        return _inner_run(handle)
    finally:
        t1 = time.time_ns()
        tid = threading.get_native_id()
        for ids in {before, _step_spans(handle._context)} - {None}:
            with lock:
                truth["asyncio"].append(f"{tid} {ids[0]:032x} {ids[1]:016x} {t0} {t1} - {t0} {t0}")


asyncio.events.Handle._run = _timed_run


def on_term(*_):
    stop.set()


signal.signal(signal.SIGTERM, on_term)
# Warm up: the first spans resolve the SDK's names and publish the process
# context with the provider's resource before the profiler looks.
for _ in range(3):
    with tracer.start_as_current_span("warmup"):
        burn(1)
if not args.gate:
    print(f"pid {os.getpid()}", flush=True)
if args.duration:
    threading.Timer(args.duration, stop.set).start()
threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.threads)]
threads.append(threading.Thread(target=lambda: asyncio.run(tasks())))
for t in threads:
    t.start()
while not stop.is_set():
    stop.wait(0.2)
for t in threads:
    t.join()
for kind, lines in truth.items():
    with open(f"{args.out}.{kind}", "w") as f:
        f.write("\n".join(lines) + "\n")
with open(f"{args.out}.names", "w") as f:
    f.write("".join(f"{s} {n} {r}\n" for s, (n, r) in names.items()))
st = sys.modules.get("spanprof_otel")
print(f"spanwork: spanprof_otel stats {st.stats() if st else None}", file=sys.stderr)
