// The `braid` command line, without LibTorch or CUDA: the commands that need
// them run in braid-torch (client/cli.h).
#include "client/cli.h"

int main(int argc, char** argv) { return braid::client::CliMain(argc, argv, nullptr); }
