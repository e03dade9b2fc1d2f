FROM python:3.13-slim AS base
ENV PYTHONPERFSUPPORT=1
RUN pip install flask

FROM base
COPY app.py /app/
CMD ["gunicorn", "app:app"]
