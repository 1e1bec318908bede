// dayzero: entry point; subcommands live in one file each.
int main() { return 0; }
