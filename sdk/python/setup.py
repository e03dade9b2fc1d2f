"""Builds spanprof_otel._native from sdk/c/otel_thread_ctx.h.

The header lives in ../c in the repository; it is copied into csrc/ at
build time (and shipped in the sdist from there), so `pip install
./sdk/python` and an sdist build both find it."""

import filecmp
import platform
import shutil
from pathlib import Path

from setuptools import Extension, setup

here = Path(__file__).resolve().parent
header = here.parent / "c" / "otel_thread_ctx.h"
vendored = here / "csrc" / "otel_thread_ctx.h"
if header.exists() and not (vendored.exists() and filecmp.cmp(header, vendored, shallow=False)):
    vendored.parent.mkdir(exist_ok=True)
    shutil.copyfile(header, vendored)
if not vendored.exists():
    raise SystemExit(f"otel_thread_ctx.h not found at {header} or {vendored}: build from the spanprof repository")

cflags = ["-fPIC", "-fno-omit-frame-pointer", "-O2", "-Wall"]
# TLS descriptors for the library's own TLS (the OTEP's dialect); arm64
# uses them by default, x86-64 needs the flag.
if platform.machine() in ("x86_64", "AMD64"):
    cflags.append("-mtls-dialect=gnu2")

setup(
    ext_modules=[
        Extension(
            "spanprof_otel._native",
            sources=["src/spanprof_otel/_native.c"],
            include_dirs=["csrc"],
            depends=["csrc/otel_thread_ctx.h"],
            extra_compile_args=cflags,
            extra_link_args=["-Wl,--build-id=sha1"],
        )
    ],
)
