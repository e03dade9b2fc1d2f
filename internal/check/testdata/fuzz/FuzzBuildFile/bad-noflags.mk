go test fuzz v1
string("CFLAGS = -O2 -g\x0a\x0aprog: prog.c\x0a\x09$(CC) $(CFLAGS) -o $@ $<\x0a\x09strip prog\x0a\x0atool: tool.c\x0a\x09gcc -O2 -o tool tool.c\x0a")
