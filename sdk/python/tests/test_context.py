"""spanprof_otel against the real OpenTelemetry SDK: what each thread's
record holds after attach, detach, nesting, asyncio task switches and
fork, and what the process context carries."""

import asyncio
import os
import struct
import subprocess
import sys
import threading

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import spanprof_otel

trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "spanprof-unit"})))
tracer = trace.get_tracer("unit")


def parse(rec):
    """The record's fields (SPEC.md's layout)."""
    assert rec is not None, "no record published"
    trace_id, span_id, valid, flags, size = struct.unpack_from("=16s8sBBH", rec)
    assert len(rec) == 28 + size
    attrs, off = {}, 28
    while off < len(rec):
        k, n = rec[off], rec[off + 1]
        attrs[k] = rec[off + 2 : off + 2 + n].decode()
        off += 2 + n
    return trace_id.hex(), span_id.hex(), valid, flags, attrs


def want(span, name=None, route=None):
    c = span.get_span_context()
    attrs = {}
    if name is not None:
        attrs[0] = name
    if route is not None:
        attrs[1] = route
    return f"{c.trace_id:032x}", f"{c.span_id:016x}", 1, int(c.trace_flags), attrs


def test_loaded_as_runtime_context():
    assert type(context._RUNTIME_CONTEXT) is spanprof_otel.SpanprofRuntimeContext


def test_span_published_and_cleared():
    assert spanprof_otel.record() is None
    with tracer.start_as_current_span("GET /users/{id}", attributes={"http.route": "/users/{id}"}) as s:
        assert parse(spanprof_otel.record()) == want(s, "GET /users/{id}", "/users/{id}")
    assert spanprof_otel.record() is None


def test_nested_restores_parent():
    with tracer.start_as_current_span("parent") as p:
        outer = spanprof_otel.record()
        with tracer.start_as_current_span("child") as c:
            assert parse(spanprof_otel.record()) == want(c, "child")
            with tracer.start_as_current_span("grandchild") as g:
                assert parse(spanprof_otel.record()) == want(g, "grandchild")
            assert parse(spanprof_otel.record()) == want(c, "child")
        assert spanprof_otel.record() == outer
        assert parse(outer) == want(p, "parent")
    assert spanprof_otel.record() is None


def test_route_set_after_attach_is_not_read_back():
    # Key 1 is http.route as the span had it at attach time.
    with tracer.start_as_current_span("late") as s:
        s.set_attribute("http.route", "/late")
        assert parse(spanprof_otel.record()) == want(s, "late")
        tok = context.attach(context.get_current())
        assert parse(spanprof_otel.record()) == want(s, "late", "/late")
        context.detach(tok)


def test_invalid_and_remote_spans():
    tok = context.attach(trace.set_span_in_context(trace.INVALID_SPAN))
    assert spanprof_otel.record() is None
    context.detach(tok)
    remote = NonRecordingSpan(SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1)))
    tok = context.attach(trace.set_span_in_context(remote))
    # A propagated parent is the caller's span, in another process.
    assert spanprof_otel.record() is None
    child = trace.get_tracer("t").start_span("handle")
    tok2 = context.attach(trace.set_span_in_context(child))
    assert parse(spanprof_otel.record())[:2] == ("%032x" % 0xABC, "%016x" % child.get_span_context().span_id)
    context.detach(tok2)
    child.end()
    assert spanprof_otel.record() is None
    context.detach(tok)
    assert spanprof_otel.record() is None


def test_long_values_truncated_at_a_character():
    before = spanprof_otel.stats()["truncated"]
    name = "é" * 200  # 400 bytes
    with tracer.start_as_current_span(name):
        got = parse(spanprof_otel.record())[4][0]
    assert got == "é" * 127
    assert spanprof_otel.stats()["truncated"] == before + 1


def test_threads_have_their_own_record():
    seen = {}
    ready, done = threading.Event(), threading.Event()

    def other():
        seen["before"] = spanprof_otel.record()
        with tracer.start_as_current_span("other") as s:
            seen["want"] = want(s, "other")
            seen["in"] = parse(spanprof_otel.record())
            ready.set()
            done.wait(10)
        seen["after"] = spanprof_otel.record()

    with tracer.start_as_current_span("main") as m:
        t = threading.Thread(target=other)
        t.start()
        assert ready.wait(10)
        assert parse(spanprof_otel.record()) == want(m, "main")
        done.set()
        t.join()
    assert seen["before"] is None and seen["after"] is None
    assert seen["in"] == seen["want"]


def test_asyncio_task_switch_publishes_the_running_task():
    log = []

    async def work(k):
        with tracer.start_as_current_span(f"task-{k}") as s:
            for _ in range(3):
                log.append((parse(spanprof_otel.record()), want(s, f"task-{k}")))
                await asyncio.sleep(0)
        log.append((spanprof_otel.record(), None))

    async def main():
        await asyncio.gather(*(work(k) for k in range(3)))
        # A plain callback outside any span
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(lambda: fut.set_result(spanprof_otel.record()))
        return await fut

    before = spanprof_otel.stats()["asyncio_handles"]
    assert asyncio.run(main()) is None
    assert spanprof_otel.stats()["asyncio_handles"] > before
    assert len(log) == 12
    for got, w in log:
        assert got == w
    assert spanprof_otel.record() is None


def test_asyncio_loop_inside_a_span_restores_it():
    async def inner():
        with tracer.start_as_current_span("inner") as s:
            await asyncio.sleep(0)
            return parse(spanprof_otel.record()), want(s, "inner")

    with tracer.start_as_current_span("outer") as o:
        got, w = asyncio.run(inner())
        assert got == w
        # The loop's own context (the outer span) is published between
        # handles and after the loop.
        assert parse(spanprof_otel.record()) == want(o, "outer")


def pb_fields(b):
    """Length-delimited fields of a protobuf message: [(number, bytes)]."""
    out, i = [], 0
    while i < len(b):
        key, i = varint(b, i)
        assert key & 7 == 2, "only length-delimited fields expected"
        n, i = varint(b, i)
        out.append((key >> 3, b[i : i + n]))
        i += n
    return out


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def kv(b):
    f = dict(pb_fields(b))
    key = f[1].decode()
    val = dict(pb_fields(f[2]))
    if 1 in val:
        return key, val[1].decode()
    return key, [dict(pb_fields(v))[1].decode() for _, v in pb_fields(val[5])]


def process_attrs():
    pc = spanprof_otel.process_context()
    assert pc is not None
    version, at, payload = pc
    assert version == 2 and at > 0
    top = pb_fields(payload)
    resource = dict(kv(v) for _, v in pb_fields(dict(top)[1]))
    extra = dict(kv(v) for n, v in top if n == 2)
    return resource, extra


def test_process_context_carries_resource_and_key_map():
    with tracer.start_as_current_span("any"):
        pass
    resource, extra = process_attrs()
    assert resource["service.name"] == "spanprof-unit"
    assert extra == {
        "threadlocal.schema_version": "tls_v1",
        "threadlocal.attribute_key_map": ["span.name", "http.route"],
    }
    with open("/proc/self/maps") as f:
        assert "OTEL_CTX" in f.read()


def test_fork_child_republishes():
    with tracer.start_as_current_span("forked") as s:
        parent_rec = spanprof_otel.record()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                with open("/proc/self/maps") as f:
                    mapped = "OTEL_CTX" in f.read()
                resource, _ = process_attrs()
                ok = mapped and resource["service.name"] == "spanprof-unit" and spanprof_otel.record() == parent_rec
                os.write(w, b"ok" if ok else repr((mapped, resource, spanprof_otel.record())).encode())
            finally:
                os._exit(0)
        os.close(w)
        msg = os.read(r, 4096)
        os.waitpid(pid, 0)
        assert msg == b"ok"
        assert parse(spanprof_otel.record()) == want(s, "forked")


def test_nothing_failed():
    st = spanprof_otel.stats()
    assert st["errors"] == 0 and st["no_state"] == 0 and st["unresolved"] == 0, st
    assert st["published"] > 0


def test_opentelemetry_instrument_needs_no_code_change(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import struct, sys\n"
        "from opentelemetry import trace\n"
        "with trace.get_tracer('app').start_as_current_span('handler') as s:\n"
        "    rec = sys.modules['spanprof_otel'].record()\n"
        "    c = s.get_span_context()\n"
        "    ok = rec is not None and rec[:24] == c.trace_id.to_bytes(16, 'big') + c.span_id.to_bytes(8, 'big')\n"
        "    print('published' if ok else 'not published', rec)\n"
        "pc = sys.modules['spanprof_otel'].process_context()\n"
        "print('service', b'instrumented-unit' in pc[2])\n"
    )
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, OTEL_PYTHON_CONTEXT="spanprof", OTEL_SERVICE_NAME="instrumented-unit",
               OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    out = subprocess.run([os.path.join(bindir, "opentelemetry-instrument"), sys.executable, str(app)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "published" in out.stdout.split()[0], out.stdout + out.stderr
    assert "service True" in out.stdout, out.stdout
