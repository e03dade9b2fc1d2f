/* pingpong.c - a switch-heavy workload for the off-CPU cost benchmark.
 *
 *   pingpong SECONDS
 *
 * Two threads pass one byte back and forth over two pipes, so each round
 * trip blocks both threads once in pipe_read: about as many context
 * switches per second as the machine can make. stdout gets "pid <pid>" at
 * start and "rounds <n>" at the end. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static volatile int done;

static void *echo(void *arg)
{
	char c;
	(void)arg;
	while (read(ab[0], &c, 1) == 1) {
		if (write(ba[1], &c, 1) != 1)
			break;
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	done = 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	if (pipe(ab) || pipe(ba)) {
		perror("pipe");
		return 1;
	}
	pthread_t th;
	pthread_create(&th, NULL, echo, NULL);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)atoi(argv[1]));
	uint64_t rounds = 0;
	char c = 'x';
	while (!done) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			break;
		rounds++;
	}
	close(ab[1]);
	pthread_join(th, NULL);
	printf("rounds %llu\n", (unsigned long long)rounds);
	return 0;
}
