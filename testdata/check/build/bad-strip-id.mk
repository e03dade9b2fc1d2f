CFLAGS = -O2 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
LDFLAGS = -Wl,--build-id=sha1

prog: prog.c
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<
	objcopy --only-keep-debug prog prog.debug
	strip --strip-all -R .note.gnu.build-id prog
