/* Entry code written in assembly without .type or .size, like the dynamic
 * loader's _start and _dl_start_user (glibc's RTLD_START): their symbols
 * are STT_NOTYPE of size 0 and still name code. A label inside a C function
 * must not split that function. */
__attribute__((noinline)) int label_work(int x)
{
	volatile int v = x;

	v += 3;
	__asm__ volatile(".globl label_inside\nlabel_inside:");
	v *= 7;
	return v;
}

__asm__(".text\n"
	".globl label_entry\n"
	"label_entry:\n"
	"\tmov $1, %edi\n"
	"\tcall label_work\n"
	"label_entry_user:\n"
	"\tret\n");

int main(void)
{
	return label_work(1) == 0;
}
