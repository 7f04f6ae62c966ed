/* hostile: grows linear memory 16 MiB at a time until the host refuses.
 * A host with a memory limit makes memory.grow return -1; the guest then
 * proves it is still alive. Exit 0 when refused, 1 when it reached 4 GiB. */
#include <stdio.h>

int main(void) {
    unsigned long start = __builtin_wasm_memory_size(0);
    unsigned long grown = 0;
    for (;;) {
        if (__builtin_wasm_memory_grow(0, 256) == (unsigned long)-1) break;
        grown += 256;
        if (start + grown >= 65536) {
            printf("memory.grow never refused: reached 4 GiB\n");
            return 1;
        }
    }
    printf("memory.grow refused after %lu MiB (%lu pages total)\n", grown / 16, start + grown);
    return 0;
}
