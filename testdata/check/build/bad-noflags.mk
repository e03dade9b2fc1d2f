CFLAGS = -O2 -g

prog: prog.c
	$(CC) $(CFLAGS) -o $@ $<
	strip prog

tool: tool.c
	gcc -O2 -o tool tool.c
