// Placeholder until the CPU kernels land.
namespace dayzero::kernels::cpu {}
