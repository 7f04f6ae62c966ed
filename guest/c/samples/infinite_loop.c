/* hostile: spins forever. The host must stop it at its deadline and stay up. */
#include <stdio.h>

int main(void) {
    printf("spinning forever\n");
    fflush(stdout);
    volatile unsigned long long n = 0;
    for (;;) n++;
}
