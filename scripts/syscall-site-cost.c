/* Cost of one system call through an inline `mov $nr,%eax; syscall` site:
 * `cc -O2 -o cost scripts/syscall-site-cost.c && ./cost FILE`, and under
 * `atoll run [--syscall-sites trap] -- sh -c 'echo x > /atoll/f; exec ./cost /atoll/f'`
 * (docs/BENCHMARKS.md, "Rewriting trapped system-call sites"). */
#include <stdio.h>
#include <time.h>
#include <fcntl.h>
static long sys_getppid(void){ long r; asm volatile("nop\n\tmov $110, %%eax\n\tsyscall" : "=a"(r) :: "rcx","r11","memory"); return r; }
static long sys_lseek(long fd){ long r; register long d asm("rdx")=0; asm volatile("nop\n\tmov $8, %%eax\n\tsyscall" : "=a"(r) : "D"(fd),"S"(0L),"r"(d) : "rcx","r11","memory"); return r; }
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e9+t.tv_nsec; }
int main(int argc,char**argv){
  int n=200000; long s=0; double t0=now();
  for(int i=0;i<n;i++) s+=sys_getppid();
  double t1=now();
  int fd=open(argv[1],O_RDONLY);
  for(int i=0;i<n;i++) s+=sys_lseek(fd);
  double t2=now();
  printf("getppid (host call) %.0f ns, lseek of %s %.0f ns\n",(t1-t0)/n, argv[1], (t2-t1)/n);
  return s==12345;
}
