go test fuzz v1
string("FROM debian:bookworm AS build\x0aRUN apt-get update && apt-get install -y gcc make\x0aCOPY . /src\x0aRUN cd /src && CFLAGS=\x22-O2\x22 ./configure && make\x0aRUN gcc -O2 -o /usr/local/bin/tool /src/tool.c && strip /usr/local/bin/tool\x0a")
