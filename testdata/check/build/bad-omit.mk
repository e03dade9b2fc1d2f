CFLAGS = -O2 -fomit-frame-pointer
LDFLAGS = -Wl,--build-id=none

prog: prog.c
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<
