ARG PY=3.12
FROM python:${PY}-slim AS base
RUN pip install flask

# The image built: the last stage, from base, still without the trampoline.
FROM base
COPY app.py /app/
CMD ["python", "/app/app.py"]
