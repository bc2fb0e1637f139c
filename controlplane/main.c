/* controlplane/main: the airlockd binary (all of it lives in the library: daemon.c). */
#include "cp.h"

int main(int argc, char **argv);

int main(int argc, char **argv)
{
    return cp_main(argc, argv);
}
