// The one Catch2 main shared by every unit-test executable.
#define STRATA_CATCH_SESSION
#include "catch_compat.h"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
