FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y clang-19 make
ENV CFLAGS="-O2 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer" \
    LDFLAGS="-Wl,--build-id=sha1"
COPY . /src
RUN make -C /src
