// The C++ cases of the hybrid unwinding fixture: std::mutex and
// std::condition_variable through libstdc++ (no frame pointers either).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

extern "C" {
volatile int cxx_stop;
void *cxx_mutex_thread(void *);
void *cxx_mutex_holder(void *);
void *cxx_cond_thread(void *);
}

static std::mutex mu;
static volatile unsigned long counter;

__attribute__((noinline)) static void case_cxxmutex()
{
	while (!cxx_stop) {
		mu.lock();
		counter++;
		mu.unlock();
	}
}

__attribute__((noinline)) static void hold_cxx_lock()
{
	while (!cxx_stop) {
		{
			std::lock_guard<std::mutex> g(mu);
			std::this_thread::sleep_for(std::chrono::milliseconds(2));
		}
		std::this_thread::yield();
	}
}

__attribute__((noinline)) static void case_cxxcond()
{
	std::mutex m;
	std::condition_variable cv;
	std::unique_lock<std::mutex> l(m);
	while (!cxx_stop)
		cv.wait_for(l, std::chrono::milliseconds(2));
}

void *cxx_mutex_thread(void *) { case_cxxmutex(); return nullptr; }
void *cxx_mutex_holder(void *) { hold_cxx_lock(); return nullptr; }
void *cxx_cond_thread(void *) { case_cxxcond(); return nullptr; }
