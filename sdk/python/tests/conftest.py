import os

# Before anything imports opentelemetry.context, which loads the runtime
# context named here once.
os.environ["OTEL_PYTHON_CONTEXT"] = "spanprof"
os.environ.pop("OTEL_SERVICE_NAME", None)
