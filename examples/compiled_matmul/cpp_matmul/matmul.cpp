// Two C++ matmuls of (n x k) by (k x m) tensors, for d5pipe's level 0 (built with
// torch.utils.cpp_extension by the pipeline): a naive triple loop, and a cache-blocked one with a
// hand-written backward (dA = dC B^T, dB = A^T dC, each through the same blocked kernel).
#include <torch/extension.h>

#include <algorithm>

namespace {

template <typename T>
void naive_kernel(const T* a, const T* b, T* c, int64_t n, int64_t k, int64_t m) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * m + j];
      c[i * m + j] = acc;
    }
}

constexpr int64_t BLOCK = 64;

// i-p-j order inside BLOCK x BLOCK tiles: the innermost loop walks rows of B and C contiguously.
template <typename T>
void blocked_kernel(const T* a, const T* b, T* c, int64_t n, int64_t k, int64_t m) {
  std::fill(c, c + n * m, T(0));
  for (int64_t i0 = 0; i0 < n; i0 += BLOCK)
    for (int64_t p0 = 0; p0 < k; p0 += BLOCK)
      for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t i1 = std::min(i0 + BLOCK, n), p1 = std::min(p0 + BLOCK, k), j1 = std::min(j0 + BLOCK, m);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t p = p0; p < p1; ++p) {
            const T aip = a[i * k + p];
            const T* brow = b + p * m;
            T* crow = c + i * m;
            for (int64_t j = j0; j < j1; ++j) crow[j] += aip * brow[j];
          }
      }
}

template <typename Kernel>
torch::Tensor run(torch::Tensor a, torch::Tensor b, Kernel kernel_of) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul of (n, k) by (k, m) tensors");
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "CPU tensors");
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto c = torch::empty({a.size(0), b.size(1)}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "matmul", [&] {
    kernel_of(scalar_t{})(ac.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(), a.size(0),
                          a.size(1), b.size(1));
  });
  return c;
}

}  // namespace

torch::Tensor naive_matmul(torch::Tensor a, torch::Tensor b) {
  return run(a, b, [](auto zero) { return &naive_kernel<decltype(zero)>; });
}

torch::Tensor blocked_matmul(torch::Tensor a, torch::Tensor b) {
  return run(a, b, [](auto zero) { return &blocked_kernel<decltype(zero)>; });
}

std::vector<torch::Tensor> blocked_matmul_backward(torch::Tensor grad, torch::Tensor a, torch::Tensor b) {
  return {blocked_matmul(grad, b.t()), blocked_matmul(a.t(), grad)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("naive_matmul", &naive_matmul, "C = A B, a naive triple loop");
  m.def("blocked_matmul", &blocked_matmul, "C = A B, in 64 x 64 tiles");
  m.def("blocked_matmul_backward", &blocked_matmul_backward, "(dA, dB) of C = A B, through blocked_matmul");
}
