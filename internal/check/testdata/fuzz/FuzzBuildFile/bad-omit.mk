go test fuzz v1
string("CFLAGS = -O2 -fomit-frame-pointer\x0aLDFLAGS = -Wl,--build-id=none\x0a\x0aprog: prog.c\x0a\x09$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<\x0a")
