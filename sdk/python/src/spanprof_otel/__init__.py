"""spanprof_otel publishes each thread's current OpenTelemetry span where an
eBPF profiler reads it: the OTEP 4947 thread-context record behind the TLS
variable ``otel_thread_ctx_v1`` (exported by the ``_native`` extension), and
the OTEP 4719 process context with the service's resource.

Enable it with ``OTEL_PYTHON_CONTEXT=spanprof``: OpenTelemetry then loads
:class:`SpanprofRuntimeContext` as its runtime context, so every attach and
detach (plain SDK use and ``opentelemetry-instrument`` alike) publishes the
span of the context made current. asyncio handles publish their task's span
while they run, and a forked child publishes its own process context.
"""

from __future__ import annotations

import asyncio.events
import os
import sys
import threading
from contextvars import ContextVar

from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

from . import _native

__all__ = ["SpanprofRuntimeContext", "ATTRIBUTE_KEY_MAP", "stats", "record", "process_context"]

# Key byte -> attribute name, published as threadlocal.attribute_key_map:
# 0 is the span's name, 1 its http.route when set at attach time.
ATTRIBUTE_KEY_MAP = ("span.name", "http.route")

_lock = threading.Lock()
_var: ContextVar | None = None
_resource_seen: object = None
_published: list | None = None
_fork_hook = False
_sdk_found = False


class SpanprofRuntimeContext(ContextVarsRuntimeContext):
    """OpenTelemetry's contextvars runtime context that also publishes the
    span of the context current on this thread after every attach and
    detach. attach and detach are C functions bound to the context
    variable, so the publish adds no Python frame."""

    def __init__(self) -> None:
        super().__init__()
        var = self._current_context
        self.attach = _native.attacher(var)
        self.detach = _native.detacher(var)
        _install(var)


def stats() -> dict:
    """Counters of the publishes and of what could not be published:
    errors (a span that could not be read), no_state (per-thread state not
    allocated), unresolved (attaches before OpenTelemetry's span key was
    importable), truncated (values cut to 255 bytes); in each of these cases
    NULL (no span) was stored, never a wrong record."""
    return _native.stats()


def record() -> bytes | None:
    """This thread's published record (28-byte header and attributes), or
    None when no span is published."""
    return _native.record()


def process_context() -> tuple[int, int, bytes] | None:
    """(version, published_at_ns, protobuf payload) of the published
    process context, or None."""
    return _native.process_context()


def _install(var: ContextVar) -> None:
    global _var, _fork_hook
    with _lock:
        _var = var
        _native.set_resolver(_resolve)
        _install_asyncio(var)
        if not _fork_hook:
            os.register_at_fork(after_in_child=_after_fork_child)
            _fork_hook = True
        _publish_process(_env_resource())


def _resolve() -> None:
    # opentelemetry.trace imports opentelemetry.context, which is still
    # loading this class when __init__ runs: resolve on the first attach.
    import opentelemetry.trace as trace_api
    from opentelemetry.trace.propagation import _SPAN_KEY

    _native.configure(_SPAN_KEY, trace_api.SpanContext, vars(trace_api), _on_provider)
    _find_sdk()


def _find_sdk() -> None:
    # The SDK's spans are read field by field, faster than through their
    # properties; other spans through the API's methods.
    global _sdk_found
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    if not _sdk_found and sdk is not None and isinstance(getattr(sdk, "ReadableSpan", None), type):
        _native.set_sdk_span_type(sdk.ReadableSpan)
        _sdk_found = True


def _install_asyncio(var: ContextVar) -> None:
    # Every callback and task step of asyncio's event loops runs through
    # Handle._run in the handle's own contextvars.Context, which switches
    # the current span without an attach. Loops with their own handle type
    # (uvloop) do not run it.
    handle = asyncio.events.Handle
    orig = getattr(handle, "_spanprof_original_run", None) or handle._run
    handle._spanprof_original_run = orig
    handle._run = _native.handle_runner(orig, var)


def _env_resource() -> dict[str, str]:
    name = os.environ.get("OTEL_SERVICE_NAME")
    return {"service.name": name} if name else {}


def _resource_of(provider) -> dict[str, str] | None:
    resource = getattr(provider, "resource", None)
    attrs = getattr(resource, "attributes", None)
    if attrs is None:
        return None
    return {str(k): v for k, v in attrs.items() if isinstance(v, str)}


def _on_provider(provider) -> None:
    """Called from attach when opentelemetry.trace's tracer provider changed
    (and now and then in case its resource did)."""
    global _resource_seen
    _find_sdk()
    resource = getattr(provider, "resource", None)
    if resource is not None and resource is _resource_seen:
        return
    _resource_seen = resource
    attrs = _resource_of(provider)
    _publish_process(attrs if attrs is not None else _env_resource())


def _publish_process(resource: dict[str, str]) -> None:
    global _published
    items = sorted(resource.items())
    if items == _published:
        return
    _native.publish_process(items, list(ATTRIBUTE_KEY_MAP))
    _published = items


def _after_fork_child() -> None:
    global _published
    _native.after_fork_child()
    items, _published = _published, None
    _publish_process(dict(items or ()))
    if _var is not None:
        _native.publish_current(_var)
