/*
 * _native: the hot path of spanprof_otel. OpenTelemetry's runtime context
 * calls attach/detach on every span it makes current; each call here sets
 * the context variable and publishes the span of the context now current
 * as this thread's OTEP 4947 record (sdk/c/otel_thread_ctx.h), in C, so
 * that a profiler reading the thread's TLS pointer sees it at once.
 *
 * Everything runs with the GIL held; the counters and the lazily resolved
 * names need no other lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first: pyconfig.h defines _GNU_SOURCE */

#ifdef Py_GIL_DISABLED
/* The counters, the per-thread record and the resolved names rely on the GIL. */
#error "spanprof_otel supports CPython with the GIL only"
#endif

#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"

#if PY_VERSION_HEX >= 0x030D0000
#define get_optional_attr PyObject_GetOptionalAttr
#else
#define get_optional_attr _PyObject_LookupAttr
#endif

#define ATTR_MAX 255 /* one attribute value: its length is a byte */

/* Key bytes of threadlocal.attribute_key_map, published in the process
 * context by the Python side. */
enum { KEY_SPAN_NAME = 0, KEY_HTTP_ROUTE = 1 };

static struct {
	unsigned long long published; /* records stored */
	unsigned long long cleared;   /* NULL stored: no span, or an invalid one */
	unsigned long long errors;    /* a span that could not be read: NULL stored */
	unsigned long long no_state;  /* per-thread state not allocated: NULL stored */
	unsigned long long truncated; /* attribute values cut to 255 bytes */
	unsigned long long unresolved; /* attaches before OpenTelemetry's span key was known */
	unsigned long long handles;   /* asyncio handles run */
	unsigned long long provider_checks; /* calls of the provider callback */
} stats;

/* Resolved by the Python side once opentelemetry.trace is importable
 * (it is not while opentelemetry.context loads this runtime context). */
static PyObject *span_key;          /* opentelemetry.trace.propagation._SPAN_KEY */
static PyTypeObject *span_ctx_type; /* opentelemetry.trace.SpanContext */
static PyObject *trace_globals;     /* opentelemetry.trace's module dict */
static PyObject *provider_seen;     /* the _TRACER_PROVIDER last reported */
static PyObject *on_provider;       /* callback(provider) */
static PyObject *resolver;          /* callback() that calls configure() */
static PyTypeObject *sdk_span_type; /* opentelemetry.sdk.trace.ReadableSpan, once imported */
static unsigned provider_tick;

static PyObject *str_get_span_context, *str_name, *str_attributes, *str_dict, *str_get, *str_http_route,
	*str_trace_id, *str_span_id, *str__name, *str__attributes, *str__context, *str_trace_flags, *str_is_valid, *str_is_remote, *str_tracer_provider, *str_context;

static void clear_record(void)
{
	otel_thread_ctx_reset();
	stats.cleared++;
}

/* A str's UTF-8 bytes, cut at a character boundary to fit a value. */
static int utf8_value(PyObject *s, otel_thread_ctx_attr *a, uint8_t key)
{
	Py_ssize_t n;
	const char *p = PyUnicode_AsUTF8AndSize(s, &n);
	if (!p)
		return -1;
	if (n > ATTR_MAX) {
		n = ATTR_MAX;
		while (n > 0 && ((unsigned char)p[n] & 0xC0) == 0x80)
			n--;
		stats.truncated++;
	}
	a->key = key;
	a->value = p;
	a->len = (size_t)n;
	return 0;
}

/* The span's http.route, new reference or NULL (no error) when unset. */
static PyObject *span_route(PyObject *span, int sdk)
{
	PyObject *attrs = NULL, *route = NULL;
	/* The SDK's attributes property wraps its BoundedAttributes in a new
	 * mappingproxy on every call: read the field it wraps. */
	if (get_optional_attr(span, sdk ? str__attributes : str_attributes, &attrs) < 0 || !attrs)
		return NULL;
	if (PyDict_Check(attrs)) {
		route = Py_XNewRef(PyDict_GetItemWithError(attrs, str_http_route));
	} else {
		/* The SDK's BoundedAttributes keeps a plain dict: read it without
		 * a Python-level call; any other mapping through its get(). */
		PyObject *d = NULL;
		if (get_optional_attr(attrs, str_dict, &d) < 0) {
			Py_DECREF(attrs);
			return NULL;
		}
		if (d && PyDict_Check(d))
			route = Py_XNewRef(PyDict_GetItemWithError(d, str_http_route));
		else if (PyMapping_Check(attrs))
			route = PyObject_CallMethodOneArg(attrs, str_get, str_http_route);
		Py_XDECREF(d);
	}
	Py_DECREF(attrs);
	if (route == Py_None)
		Py_CLEAR(route);
	return route;
}

/* v, a non-negative int below 2**(8n), as n big-endian bytes (W3C order). */
static int id_bytes(PyObject *v, uint8_t *out, int n)
{
	if (!PyLong_Check(v)) {
		PyErr_Format(PyExc_TypeError, "span id: want int, got %T", v);
		return -1;
	}
#if PY_VERSION_HEX >= 0x030D0000
	Py_ssize_t r = PyLong_AsNativeBytes(v, out, n, Py_ASNATIVEBYTES_BIG_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
	if (r < 0)
		return -1;
	if (r > n) {
		PyErr_SetString(PyExc_OverflowError, "span id too large");
		return -1;
	}
	return 0;
#else
	return _PyLong_AsByteArray((PyLongObject *)v, out, (size_t)n, 0, 0);
#endif
}

/* Publishes span's record; -1 with a Python error set when it cannot be
 * read (the caller stores NULL). */
static int publish_span(PyObject *span)
{
	/* SDK spans: their fields rather than the properties and method that
	 * return them, a Python call each. */
	int sdk = sdk_span_type && PyObject_TypeCheck(span, sdk_span_type);
	PyObject *sc = NULL;
	if (sdk && get_optional_attr(span, str__context, &sc) < 0)
		return -1;
	if (!sc || Py_TYPE(sc) != span_ctx_type) {
		Py_XDECREF(sc);
		sc = PyObject_CallMethodNoArgs(span, str_get_span_context);
	}
	if (!sc)
		return -1;
	PyObject *tid, *sid, *flags, *valid, *remote = NULL;
	int rc = -1, owned = 0;
	if (Py_TYPE(sc) == span_ctx_type && PyTuple_GET_SIZE(sc) >= 6) {
		tid = PyTuple_GET_ITEM(sc, 0);
		sid = PyTuple_GET_ITEM(sc, 1);
		remote = PyTuple_GET_ITEM(sc, 2);
		flags = PyTuple_GET_ITEM(sc, 3);
		valid = PyTuple_GET_ITEM(sc, 5);
	} else if (sc == Py_None) {
		Py_DECREF(sc);
		clear_record();
		return 0;
	} else {
		owned = 1;
		tid = PyObject_GetAttr(sc, str_trace_id);
		sid = PyObject_GetAttr(sc, str_span_id);
		flags = PyObject_GetAttr(sc, str_trace_flags);
		valid = PyObject_GetAttr(sc, str_is_valid);
		remote = PyObject_GetAttr(sc, str_is_remote);
		if (!tid || !sid || !flags || !valid || !remote)
			goto out;
	}
	int ok = PyObject_IsTrue(valid);
	if (ok < 0)
		goto out;
	/* A remote span context (a propagated parent that instrumentation
	 * attaches before its server span starts) is the caller's span, in
	 * another process: this thread runs no span of its own yet. */
	int rem = PyObject_IsTrue(remote);
	if (rem < 0)
		goto out;
	if (!ok || rem) {
		clear_record();
		rc = 0;
		goto out;
	}
	uint8_t trace_id[16], span_id[8];
	if (id_bytes(tid, trace_id, 16) < 0 || id_bytes(sid, span_id, 8) < 0)
		goto out;
	long f = PyLong_AsLong(flags);
	if (f == -1 && PyErr_Occurred())
		goto out;

	otel_thread_ctx_attr attrs[2];
	size_t n = 0;
	PyObject *name = NULL, *route = NULL;
	if (get_optional_attr(span, sdk ? str__name : str_name, &name) < 0)
		goto out;
	if (name && PyUnicode_Check(name) && utf8_value(name, &attrs[n], KEY_SPAN_NAME) == 0)
		n++;
	route = span_route(span, sdk);
	if (!route && PyErr_Occurred()) {
		Py_XDECREF(name);
		goto out;
	}
	if (route && PyUnicode_Check(route) && utf8_value(route, &attrs[n], KEY_HTTP_ROUTE) == 0)
		n++;
	if (PyErr_Occurred()) {
		Py_XDECREF(name);
		Py_XDECREF(route);
		goto out;
	}
	/* One level: the runtime context says which span is current, so each
	 * publish replaces the record (in the level's other buffer: the one a
	 * reader may hold is never written). */
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (!s)
		s = otel_thread_ctx_state_alloc();
	if (s) {
		s->depth = 0;
		s->clobbered = 0;
	}
	if (!s || otel_thread_ctx_enter_attrs(trace_id, span_id, (uint8_t)f, attrs, n) != 0) {
		stats.no_state++;
		clear_record();
	} else {
		stats.published++;
	}
	Py_XDECREF(name);
	Py_XDECREF(route);
	rc = 0;
out:
	if (owned) {
		Py_XDECREF(tid);
		Py_XDECREF(sid);
		Py_XDECREF(flags);
		Py_XDECREF(valid);
		Py_XDECREF(remote);
	}
	Py_DECREF(sc);
	return rc;
}

static int resolve(void)
{
	if (span_key)
		return 1;
	if (!resolver)
		return 0;
	PyObject *r = PyObject_CallNoArgs(resolver);
	if (!r) {
		/* opentelemetry.trace not importable yet (we are inside its
		 * import): this attach cannot name a span. */
		PyErr_Clear();
		return 0;
	}
	Py_DECREF(r);
	return span_key != NULL;
}

/* Publishes the span of ctx, an OpenTelemetry Context (a dict) or NULL.
 * Never fails: what cannot be read is counted and NULL stored. */
static void publish_context(PyObject *ctx)
{
	if (!ctx || !PyDict_Check(ctx)) {
		clear_record();
		return;
	}
	if (!resolve()) {
		stats.unresolved++;
		clear_record();
		return;
	}
	PyObject *span = PyDict_GetItemWithError(ctx, span_key);
	if (!span) {
		if (PyErr_Occurred()) {
			PyErr_Clear();
			stats.errors++;
		}
		clear_record();
		return;
	}
	Py_INCREF(span);
	if (publish_span(span) < 0) {
		PyErr_Clear();
		stats.errors++;
		clear_record();
	}
	Py_DECREF(span);
}

/* Calls on_provider when opentelemetry.trace's provider changed, and every
 * 256th attach so the callback can notice a changed resource. */
static void check_provider(void)
{
	if (!trace_globals || !on_provider)
		return;
	PyObject *p = PyDict_GetItemWithError(trace_globals, str_tracer_provider);
	if (!p) {
		PyErr_Clear();
		return;
	}
	if (p == provider_seen && (++provider_tick & 255) != 0)
		return;
	Py_XSETREF(provider_seen, Py_NewRef(p));
	stats.provider_checks++;
	PyObject *r = PyObject_CallOneArg(on_provider, p);
	if (!r)
		PyErr_WriteUnraisable(on_provider);
	Py_XDECREF(r);
}

static void publish_current(PyObject *var)
{
	PyObject *cur = NULL;
	if (PyContextVar_Get(var, NULL, &cur) < 0) {
		PyErr_Clear();
		stats.errors++;
		clear_record();
		return;
	}
	publish_context(cur);
	Py_XDECREF(cur);
}

/* attach(context) -> token, bound to the runtime context's variable. */
static PyObject *ctx_attach(PyObject *var, PyObject *ctx)
{
	PyObject *tok = PyContextVar_Set(var, ctx);
	if (!tok)
		return NULL;
	check_provider();
	publish_context(ctx);
	return tok;
}

/* detach(token): restores the previous context and publishes its span. */
static PyObject *ctx_detach(PyObject *var, PyObject *tok)
{
	if (PyContextVar_Reset(var, tok) < 0)
		return NULL;
	publish_current(var);
	Py_RETURN_NONE;
}

static PyMethodDef attach_def = {"attach", ctx_attach, METH_O, "Sets the context and publishes its span."};
static PyMethodDef detach_def = {"detach", ctx_detach, METH_O, "Restores the context and publishes its span."};

/* handle_run(handle) replaces asyncio.events.Handle._run: the task or
 * callback runs in the handle's contextvars.Context without an attach, so
 * its span is published before and the loop's own restored after. self is
 * (original _run, the runtime context's variable). */
static PyObject *handle_run(PyObject *self, PyObject *handle)
{
	PyObject *orig = PyTuple_GET_ITEM(self, 0), *var = PyTuple_GET_ITEM(self, 1);
	stats.handles++;
	PyObject *hctx = PyObject_GetAttr(handle, str_context);
	if (!hctx) {
		PyErr_Clear();
	} else if (PyContext_CheckExact(hctx)) {
		PyObject *val = NULL;
		/* Enter the handle's Context to read the variable there: cheaper
		 * than Context.get, and left before _run enters it again. */
		if (PyContext_Enter(hctx) == 0) {
			if (PyContextVar_Get(var, NULL, &val) < 0)
				PyErr_Clear();
			PyContext_Exit(hctx);
		} else {
			PyErr_Clear();
			val = PyObject_CallMethodOneArg(hctx, str_get, var);
			if (!val)
				PyErr_Clear();
		}
		publish_context(val);
		Py_XDECREF(val);
	}
	Py_XDECREF(hctx);
	PyObject *r = PyObject_CallOneArg(orig, handle);
	/* Keep a pending exception (SystemExit, KeyboardInterrupt) across the
	 * publish of the loop's context. */
	PyObject *et = NULL, *ev = NULL, *tb = NULL;
	if (!r)
		PyErr_Fetch(&et, &ev, &tb);
	publish_current(var);
	if (!r)
		PyErr_Restore(et, ev, tb);
	return r;
}

static PyMethodDef handle_run_def = {"_run", handle_run, METH_O, "Runs an asyncio handle with its span published."};

static PyObject *mod_attacher(PyObject *m, PyObject *var)
{
	if (!PyContextVar_CheckExact(var))
		return PyErr_Format(PyExc_TypeError, "attacher: want a ContextVar, got %T", var);
	return PyCFunction_NewEx(&attach_def, var, NULL);
}

static PyObject *mod_detacher(PyObject *m, PyObject *var)
{
	if (!PyContextVar_CheckExact(var))
		return PyErr_Format(PyExc_TypeError, "detacher: want a ContextVar, got %T", var);
	return PyCFunction_NewEx(&detach_def, var, NULL);
}

static PyObject *mod_handle_runner(PyObject *m, PyObject *args)
{
	PyObject *orig, *var;
	if (!PyArg_ParseTuple(args, "OO!:handle_runner", &orig, &PyContextVar_Type, &var))
		return NULL;
	PyObject *data = PyTuple_Pack(2, orig, var);
	if (!data)
		return NULL;
	PyObject *f = PyCFunction_NewEx(&handle_run_def, data, NULL);
	Py_DECREF(data);
	if (!f)
		return NULL;
	PyObject *meth = PyInstanceMethod_New(f); /* binds the handle as self */
	Py_DECREF(f);
	return meth;
}

static PyObject *mod_publish_current(PyObject *m, PyObject *var)
{
	if (!PyContextVar_CheckExact(var))
		return PyErr_Format(PyExc_TypeError, "publish_current: want a ContextVar, got %T", var);
	publish_current(var);
	Py_RETURN_NONE;
}

static PyObject *mod_publish_context(PyObject *m, PyObject *ctx)
{
	publish_context(ctx == Py_None ? NULL : ctx);
	Py_RETURN_NONE;
}

static PyObject *mod_set_resolver(PyObject *m, PyObject *fn)
{
	Py_XSETREF(resolver, Py_NewRef(fn));
	Py_RETURN_NONE;
}

static PyObject *mod_configure(PyObject *m, PyObject *args)
{
	PyObject *key, *type, *globals, *cb;
	if (!PyArg_ParseTuple(args, "UO!O!O:configure", &key, &PyType_Type, &type, &PyDict_Type, &globals, &cb))
		return NULL;
	Py_XSETREF(span_key, Py_NewRef(key));
	Py_XSETREF(span_ctx_type, (PyTypeObject *)Py_NewRef(type));
	Py_XSETREF(trace_globals, Py_NewRef(globals));
	Py_XSETREF(on_provider, Py_NewRef(cb));
	Py_CLEAR(provider_seen);
	Py_RETURN_NONE;
}

static PyObject *mod_set_sdk_span_type(PyObject *m, PyObject *type)
{
	if (!PyType_Check(type))
		return PyErr_Format(PyExc_TypeError, "set_sdk_span_type: want a type, got %T", type);
	Py_XSETREF(sdk_span_type, (PyTypeObject *)Py_NewRef(type));
	Py_RETURN_NONE;
}

static PyObject *mod_clear(PyObject *m, PyObject *unused)
{
	clear_record();
	Py_RETURN_NONE;
}

/* record() -> bytes of this thread's published record, or None. */
static PyObject *mod_record(PyObject *m, PyObject *unused)
{
	const otel_thread_ctx_record *r = __atomic_load_n(otel_thread_ctx_slot_(), __ATOMIC_ACQUIRE);
	if (!r)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)r, OTEL_THREAD_CTX_HEADER_SIZE + r->attrs_data_size);
}

static PyObject *mod_stats(PyObject *m, PyObject *unused)
{
	return Py_BuildValue("{sKsKsKsKsKsKsKsK}", "published", stats.published, "cleared", stats.cleared,
			     "errors", stats.errors, "no_state", stats.no_state, "truncated", stats.truncated,
			     "unresolved", stats.unresolved, "asyncio_handles", stats.handles,
			     "provider_checks", stats.provider_checks);
}

/* publish_process(resource: list[tuple[str, str]], keys: list[str]) */
static PyObject *mod_publish_process(PyObject *m, PyObject *args)
{
	PyObject *res, *keys;
	if (!PyArg_ParseTuple(args, "O!O!:publish_process", &PyList_Type, &res, &PyList_Type, &keys))
		return NULL;
	Py_ssize_t na = PyList_GET_SIZE(res), nk = PyList_GET_SIZE(keys);
	otel_process_ctx_attr *attrs = PyMem_Calloc((size_t)na + 1, sizeof(*attrs));
	const char **k = PyMem_Calloc((size_t)nk + 1, sizeof(*k));
	PyObject *ret = NULL;
	if (!attrs || !k) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < na; i++) {
		PyObject *kv = PyList_GET_ITEM(res, i);
		if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
			PyErr_SetString(PyExc_TypeError, "publish_process: resource items are (key, value) pairs of str");
			goto out;
		}
		if (!(attrs[i].key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kv, 0))) ||
		    !(attrs[i].value = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kv, 1))))
			goto out;
	}
	for (Py_ssize_t i = 0; i < nk; i++)
		if (!(k[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(keys, i))))
			goto out;
	if (otel_process_ctx_publish(attrs, (size_t)na, k, (size_t)nk) != 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		goto out;
	}
	ret = Py_NewRef(Py_None);
out:
	PyMem_Free(attrs);
	PyMem_Free(k);
	return ret;
}

/* process_context() -> (version, published_at_ns, payload bytes) or None:
 * what a reader finds behind the OTEL_CTX mapping this module published. */
static PyObject *mod_process_context(PyObject *m, PyObject *unused)
{
	const otel_process_ctx_header *h = otel_pctx_map_;
	if (!h)
		Py_RETURN_NONE;
	return Py_BuildValue("(IKy#)", h->version, (unsigned long long)h->monotonic_published_at_ns,
			     (const char *)(uintptr_t)h->payload, (Py_ssize_t)h->payload_size);
}

/* after_fork_child(): the process context mapping is MADV_DONTFORK, so the
 * child has none; forget it so the next publish maps a new one. */
static PyObject *mod_after_fork_child(PyObject *m, PyObject *unused)
{
	otel_pctx_map_ = NULL;
	otel_pctx_map_size_ = 0;
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"attacher", mod_attacher, METH_O, "attacher(var) -> attach(context) bound to var."},
	{"detacher", mod_detacher, METH_O, "detacher(var) -> detach(token) bound to var."},
	{"handle_runner", mod_handle_runner, METH_VARARGS, "handle_runner(orig_run, var) -> a Handle._run."},
	{"publish_current", mod_publish_current, METH_O, "Publishes the span of var's current context."},
	{"publish_context", mod_publish_context, METH_O, "Publishes the span of an OpenTelemetry Context."},
	{"set_resolver", mod_set_resolver, METH_O, "Sets the callback that calls configure()."},
	{"configure", mod_configure, METH_VARARGS, "configure(span_key, SpanContext, trace_globals, on_provider)."},
	{"set_sdk_span_type", mod_set_sdk_span_type, METH_O, "Names the SDK's span type, whose fields are read directly."},
	{"clear", mod_clear, METH_NOARGS, "Stores NULL: this thread is in no span."},
	{"record", mod_record, METH_NOARGS, "This thread's published record as bytes, or None."},
	{"stats", mod_stats, METH_NOARGS, "Counters of what was published and what was not."},
	{"publish_process", mod_publish_process, METH_VARARGS, "Publishes the OTEP 4719 process context."},
	{"process_context", mod_process_context, METH_NOARGS, "The published process context, or None."},
	{"after_fork_child", mod_after_fork_child, METH_NOARGS, "Forgets the parent's process context mapping."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "spanprof_otel's C hot path.", -1, methods};

PyMODINIT_FUNC PyInit__native(void)
{
#define INTERN(v, s)                                          \
	if (!(v = PyUnicode_InternFromString(s)))             \
		return NULL;
	INTERN(str_get_span_context, "get_span_context");
	INTERN(str_name, "name");
	INTERN(str_attributes, "attributes");
	INTERN(str_dict, "_dict");
	INTERN(str_get, "get");
	INTERN(str_http_route, "http.route");
	INTERN(str_trace_id, "trace_id");
	INTERN(str__name, "_name");
	INTERN(str__attributes, "_attributes");
	INTERN(str__context, "_context");
	INTERN(str_span_id, "span_id");
	INTERN(str_trace_flags, "trace_flags");
	INTERN(str_is_valid, "is_valid");
	INTERN(str_is_remote, "is_remote");
	INTERN(str_tracer_provider, "_TRACER_PROVIDER");
	INTERN(str_context, "_context");
#undef INTERN
	return PyModule_Create(&module);
}
