/* What a path call costs a statically linked program behind the relay's
 * seccomp supervisor (docs/BENCHMARKS.md, "Static programs naming paths"):
 * `cc -O2 -static -o sbench scripts/static-paths-cost.c` (and without
 * `-static` for the dynamic reference), then `./sbench stat|open PATH N`;
 * scripts/static-paths-bench.sh runs both under two atoll binaries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  const char*mode=argv[1],*path=argv[2];int n=atoi(argv[3]);char buf[4096];struct stat st;
  double t0=now();
  for(int i=0;i<n;i++){
    if(!strcmp(mode,"stat")){ if(stat(path,&st)){perror("stat");return 1;} }
    else { int fd=open(path,O_RDONLY); if(fd<0){perror("open");return 1;} if(read(fd,buf,sizeof buf)<0){perror("read");return 1;} close(fd);} }
  printf("%s %.2f us/op\n",mode,(now()-t0)/n/1000.0);return 0;}
