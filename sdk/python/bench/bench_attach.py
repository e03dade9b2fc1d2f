"""Cost of spanprof_otel: ns per attach+detach of a context holding an SDK
span (name and http.route set), ns per asyncio handle, and ns per
start_as_current_span enter+exit, with OTEL_PYTHON_CONTEXT=spanprof against
OpenTelemetry's default contextvars context, in interleaved rounds of
separate processes (the runtime context is chosen at import).

    python bench_attach.py [--rounds 7] [--markdown]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def measure() -> dict:
    import asyncio

    from opentelemetry import context, trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("bench")
    want = os.environ.get("OTEL_PYTHON_CONTEXT") == "spanprof"
    got = type(context._RUNTIME_CONTEXT).__name__
    if want != (got == "SpanprofRuntimeContext"):
        raise SystemExit(f"runtime context is {got}, OTEL_PYTHON_CONTEXT={os.environ.get('OTEL_PYTHON_CONTEXT')}")
    span = tracer.start_span("GET /users/{id}", attributes={"http.route": "/users/{id}"})
    ctx = trace.set_span_in_context(span)
    attach, detach = context.attach, context.detach
    out = {}

    n = 200_000
    for _ in range(2):  # the first pass warms up
        t0 = time.perf_counter_ns()
        for _ in range(n):
            detach(attach(ctx))
        out["attach_detach_ns"] = (time.perf_counter_ns() - t0) / n

    n = 50_000
    for _ in range(2):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with tracer.start_as_current_span("work"):
                pass
        out["span_ns"] = (time.perf_counter_ns() - t0) / n

    async def handles(k):
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [k]

        def cb():
            left[0] -= 1
            if left[0] == 0:
                done.set_result(None)
            else:
                loop.call_soon(cb)

        token = attach(ctx)  # the callbacks run in a context with a span
        loop.call_soon(cb)
        detach(token)
        t0 = time.perf_counter_ns()
        await done
        return (time.perf_counter_ns() - t0) / k

    n = 200_000
    for _ in range(2):
        out["asyncio_handle_ns"] = asyncio.run(handles(n))
    span.end()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure()))
        return
    runs = {"contextvars": [], "spanprof": []}
    for _ in range(a.rounds):
        for mode in runs:
            env = dict(os.environ)
            env.pop("OTEL_PYTHON_CONTEXT", None)
            if mode == "spanprof":
                env["OTEL_PYTHON_CONTEXT"] = "spanprof"
            r = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{mode} run failed:\n{r.stderr}")
            runs[mode].append(json.loads(r.stdout))
    ver = ".".join(map(str, sys.version_info[:3]))
    rows = []
    for key, label in [("attach_detach_ns", "attach+detach"), ("span_ns", "span start+end (current)"),
                       ("asyncio_handle_ns", "asyncio handle")]:
        base = statistics.median(r[key] for r in runs["contextvars"])
        sp = statistics.median(r[key] for r in runs["spanprof"])
        rows.append((label, base, sp, sp - base))
    if a.markdown:
        for label, base, sp, d in rows:
            print(f"| {ver} | {label} | {base:.0f} | {sp:.0f} | {d:+.0f} |")
    else:
        for label, base, sp, d in rows:
            print(f"python {ver}: {label}: contextvars {base:.0f} ns, spanprof {sp:.0f} ns, added {d:+.0f} ns (median of {a.rounds})")


if __name__ == "__main__":
    main()
