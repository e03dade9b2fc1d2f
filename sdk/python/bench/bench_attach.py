"""Cost of spanprof_otel: ns per attach+detach of a context holding an SDK
span (name and http.route set), per asyncio handle, and per
start_as_current_span enter+exit, with spanprof's runtime context against
OpenTelemetry's default contextvars context.

Both run in one process (started with OTEL_PYTHON_CONTEXT=spanprof), in
alternating short rounds that swap opentelemetry.context's runtime context
and asyncio's Handle._run, so load on a shared machine hits both alike;
the figures are medians over the rounds.

    OTEL_PYTHON_CONTEXT=spanprof python bench_attach.py [--rounds 21] [--markdown]
"""

import argparse
import asyncio
import asyncio.events
import statistics
import sys
import time

from opentelemetry import context, trace
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("bench")
spanprof_rc = context._RUNTIME_CONTEXT
if type(spanprof_rc).__name__ != "SpanprofRuntimeContext":
    raise SystemExit(f"runtime context is {type(spanprof_rc).__name__}: run with OTEL_PYTHON_CONTEXT=spanprof")
Handle = asyncio.events.Handle
# From the class dict: Handle._run would unwrap the instancemethod.
spanprof_run, plain_run = Handle.__dict__["_run"], Handle._spanprof_original_run
modes = {
    "contextvars": (ContextVarsRuntimeContext(), plain_run),
    "spanprof": (spanprof_rc, spanprof_run),
}


def attach_detach(ctx, n=20_000):
    attach, detach = context.attach, context.detach
    t0 = time.perf_counter_ns()
    for _ in range(n):
        detach(attach(ctx))
    return (time.perf_counter_ns() - t0) / n


def spans(n=2_000):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with tracer.start_as_current_span("work"):
            pass
    return (time.perf_counter_ns() - t0) / n


def handles(ctx, n=20_000):
    async def run():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [n]

        def cb():
            left[0] -= 1
            if left[0] == 0:
                done.set_result(None)
            else:
                loop.call_soon(cb)

        token = context.attach(ctx)  # the callbacks run in a context with a span
        loop.call_soon(cb)
        context.detach(token)
        t0 = time.perf_counter_ns()
        await done
        return (time.perf_counter_ns() - t0) / n

    return asyncio.run(run())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    span = tracer.start_span("GET /users/{id}", attributes={"http.route": "/users/{id}"})
    ctx = trace.set_span_in_context(span)
    ops = {"attach+detach": lambda: attach_detach(ctx), "asyncio handle": lambda: handles(ctx),
           "span start+end (current)": spans}
    res = {(op, m): [] for op in ops for m in modes}
    for r in range(a.rounds + 1):
        for op, f in ops.items():
            for m, (rc, run) in modes.items():
                context._RUNTIME_CONTEXT, Handle._run = rc, run
                v = f()
                if r > 0:  # the first round warms up
                    res[op, m].append(v)
    context._RUNTIME_CONTEXT, Handle._run = spanprof_rc, spanprof_run
    span.end()
    ver = ".".join(map(str, sys.version_info[:3]))
    for op in ops:
        base = statistics.median(res[op, "contextvars"])
        sp = statistics.median(res[op, "spanprof"])
        diff = statistics.median(s - b for s, b in zip(res[op, "spanprof"], res[op, "contextvars"]))
        if a.markdown:
            print(f"| {ver} | {op} | {base:.0f} | {sp:.0f} | {diff:+.0f} |")
        else:
            print(f"python {ver}: {op}: contextvars {base:.0f} ns, spanprof {sp:.0f} ns, added {diff:+.0f} ns (median of {a.rounds} rounds)")


if __name__ == "__main__":
    main()
