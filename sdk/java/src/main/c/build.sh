#!/bin/sh
# Builds the JNI library that owns otel_thread_ctx_v1 (sdk/c's writer).
# $1: the JDK (for jni.h), $2: the output directory inside the jar's classes.
# -mtls-dialect=gnu2: the OTEP's TLSDESC access; frame pointers so spanprof
# unwinds through it; a sha1 build id so symbolizers can find it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
jdk=$1
out=$2
mkdir -p "$out"
${CC:-gcc} -std=gnu11 -O2 -g -Wall -Wextra -Werror -shared -fPIC -mtls-dialect=gnu2 \
	-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
	-I"$jdk/include" -I"$jdk/include/linux" -I"$here/../../../../c" \
	-Wl,--build-id=sha1 -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now \
	-o "$out/libspanprof_otel.so" "$here/spanprof_jni.c" -lpthread
