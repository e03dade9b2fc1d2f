FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y gcc make
COPY . /src
RUN cd /src && CFLAGS="-O2" ./configure && make
RUN gcc -O2 -o /usr/local/bin/tool /src/tool.c && strip /usr/local/bin/tool
