// Vision models of the zoo, layer for layer as torchvision defines them, so
// their parameter counts equal torchvision's (VGG19 143,667,240; ResNet-50
// 25,557,032; ResNeXt-50 32x4d 25,028,904; Inception-v3 23,834,568 without the
// auxiliary classifier). torchvision's AdaptiveAvgPool2d((7, 7)) in VGG is the
// identity at 224x224 input and is left out.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/builder.h"
#include "graph/internal/zoo.h"

namespace braid::graph::zoo_internal {
namespace {

constexpr int64_t kImageNetClasses = 1000;

// torchvision VGG19 ("E" config): 16 convs with bias + ReLU, 5 max pools, and a
// 3-layer classifier with dropout 0.5.
TensorId Vgg19Body(GraphBuilder& b, TensorId x) {
  const std::vector<int64_t> cfg = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                    512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
  {
    auto s = b.NameScope("features");
    for (int64_t c : cfg) {
      x = c == 0 ? b.MaxPool(x, 2, 2) : b.Relu(b.Conv(x, c, 3, 1, 1));
    }
  }
  auto s = b.NameScope("classifier");
  x = b.Flatten(x);  // [N, 512*7*7]
  x = b.Dropout(b.Relu(b.Linear(x, 4096)), 0.5);
  x = b.Dropout(b.Relu(b.Linear(x, 4096)), 0.5);
  return b.Linear(x, kImageNetClasses);
}

TensorId ConvBn(GraphBuilder& b, TensorId x, int64_t cout, int64_t k, int64_t stride, int64_t pad,
                int64_t group = 1) {
  return b.BatchNorm(b.Conv(x, cout, k, stride, pad, group, /*bias=*/false));
}

// torchvision Bottleneck (ResNet v1.5: the stride sits on the 3x3 conv).
TensorId Bottleneck(GraphBuilder& b, TensorId x, int64_t planes, int64_t stride, int64_t groups,
                    int64_t width_per_group) {
  const int64_t in = b.Shape(x)[1];
  const int64_t width = planes * width_per_group / 64 * groups;
  const int64_t out_channels = planes * 4;
  TensorId y = b.Relu(ConvBn(b, x, width, 1, 1, 0));
  y = b.Relu(ConvBn(b, y, width, 3, stride, 1, groups));
  y = ConvBn(b, y, out_channels, 1, 1, 0);
  TensorId identity = x;
  if (stride != 1 || in != out_channels) {
    auto s = b.NameScope("downsample");
    identity = ConvBn(b, x, out_channels, 1, stride, 0);
  }
  return b.Relu(b.Add(y, identity));
}

absl::StatusOr<Graph> BuildResNetFamily(std::string name, int64_t batch, int64_t groups,
                                        int64_t width_per_group) {
  GraphBuilder b(std::move(name));
  TensorId x = b.Input("image", {batch, 3, 224, 224});
  x = b.MaxPool(b.Relu(ConvBn(b, x, 64, 7, 2, 3)), 3, 2, 1);
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    for (int64_t i = 0; i < blocks[stage]; ++i) {
      auto s = b.NameScope(absl::StrCat("layer", stage + 1, ".", i));
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      x = Bottleneck(b, x, planes, stride, groups, width_per_group);
    }
  }
  x = b.Linear(b.Flatten(b.GlobalAveragePool(x)), kImageNetClasses);
  b.MarkOutput(x);
  return std::move(b).Build();
}

// torchvision BasicConv2d: conv without bias, BatchNorm (eps 0.001), ReLU.
TensorId Basic(GraphBuilder& b, TensorId x, int64_t cout, std::vector<int64_t> kernel,
               std::vector<int64_t> pad = {0, 0}, int64_t stride = 1) {
  ConvSpec spec;
  spec.out_channels = cout;
  spec.kernel_shape = std::move(kernel);
  spec.strides = {stride, stride};
  spec.pads = {pad[0], pad[1], pad[0], pad[1]};
  spec.bias = false;
  return b.Relu(b.BatchNorm(b.Conv(x, spec), 1e-3));
}

TensorId AvgPoolBranch(GraphBuilder& b, TensorId x, int64_t cout) {
  return Basic(b, b.AveragePool(x, 3, 1, 1), cout, {1, 1});
}

TensorId InceptionA(GraphBuilder& b, TensorId x, int64_t pool_features) {
  TensorId b1 = Basic(b, x, 64, {1, 1});
  TensorId b5 = Basic(b, Basic(b, x, 48, {1, 1}), 64, {5, 5}, {2, 2});
  TensorId b3 = Basic(b, x, 64, {1, 1});
  b3 = Basic(b, Basic(b, b3, 96, {3, 3}, {1, 1}), 96, {3, 3}, {1, 1});
  return b.Concat({b1, b5, b3, AvgPoolBranch(b, x, pool_features)}, 1);
}

TensorId InceptionB(GraphBuilder& b, TensorId x) {
  TensorId b3 = Basic(b, x, 384, {3, 3}, {0, 0}, 2);
  TensorId bd = Basic(b, Basic(b, x, 64, {1, 1}), 96, {3, 3}, {1, 1});
  bd = Basic(b, bd, 96, {3, 3}, {0, 0}, 2);
  return b.Concat({b3, bd, b.MaxPool(x, 3, 2)}, 1);
}

TensorId InceptionC(GraphBuilder& b, TensorId x, int64_t c7) {
  TensorId b1 = Basic(b, x, 192, {1, 1});
  TensorId b7 = Basic(b, x, c7, {1, 1});
  b7 = Basic(b, Basic(b, b7, c7, {1, 7}, {0, 3}), 192, {7, 1}, {3, 0});
  TensorId bd = Basic(b, x, c7, {1, 1});
  bd = Basic(b, Basic(b, bd, c7, {7, 1}, {3, 0}), c7, {1, 7}, {0, 3});
  bd = Basic(b, Basic(b, bd, c7, {7, 1}, {3, 0}), 192, {1, 7}, {0, 3});
  return b.Concat({b1, b7, bd, AvgPoolBranch(b, x, 192)}, 1);
}

TensorId InceptionD(GraphBuilder& b, TensorId x) {
  TensorId b3 = Basic(b, Basic(b, x, 192, {1, 1}), 320, {3, 3}, {0, 0}, 2);
  TensorId b7 = Basic(b, x, 192, {1, 1});
  b7 = Basic(b, Basic(b, b7, 192, {1, 7}, {0, 3}), 192, {7, 1}, {3, 0});
  b7 = Basic(b, b7, 192, {3, 3}, {0, 0}, 2);
  return b.Concat({b3, b7, b.MaxPool(x, 3, 2)}, 1);
}

TensorId InceptionE(GraphBuilder& b, TensorId x) {
  TensorId b1 = Basic(b, x, 320, {1, 1});
  TensorId b3 = Basic(b, x, 384, {1, 1});
  b3 = b.Concat({Basic(b, b3, 384, {1, 3}, {0, 1}), Basic(b, b3, 384, {3, 1}, {1, 0})}, 1);
  TensorId bd = Basic(b, Basic(b, x, 448, {1, 1}), 384, {3, 3}, {1, 1});
  bd = b.Concat({Basic(b, bd, 384, {1, 3}, {0, 1}), Basic(b, bd, 384, {3, 1}, {1, 0})}, 1);
  return b.Concat({b1, b3, bd, AvgPoolBranch(b, x, 192)}, 1);
}

}  // namespace

absl::StatusOr<Graph> BuildVgg19(int64_t batch) {
  GraphBuilder b("vgg19");
  TensorId x = b.Input("image", {batch, 3, 224, 224});
  b.MarkOutput(Vgg19Body(b, x));
  return std::move(b).Build();
}

absl::StatusOr<Graph> BuildResNet50(int64_t batch) {
  return BuildResNetFamily("resnet50", batch, /*groups=*/1, /*width_per_group=*/64);
}

absl::StatusOr<Graph> BuildResNeXt50(int64_t batch) {
  return BuildResNetFamily("resnext50", batch, /*groups=*/32, /*width_per_group=*/4);
}

// torchvision inception_v3(aux_logits=False, transform_input=False) at 299x299.
// The auxiliary classifier (3,326,696 parameters, 27,161,264 in all) is left
// out: it is a second logits output that only the training loss consumes.
absl::StatusOr<Graph> BuildInceptionV3(int64_t batch) {
  GraphBuilder b("inception_v3");
  TensorId x = b.Input("image", {batch, 3, 299, 299});
  {
    auto s = b.NameScope("stem");
    x = Basic(b, x, 32, {3, 3}, {0, 0}, 2);         // 149
    x = Basic(b, x, 32, {3, 3});                    // 147
    x = Basic(b, x, 64, {3, 3}, {1, 1});            // 147
    x = b.MaxPool(x, 3, 2);                         // 73
    x = Basic(b, x, 80, {1, 1});                    // 73
    x = b.MaxPool(Basic(b, x, 192, {3, 3}), 3, 2);  // 71 -> 35
  }
  const std::pair<const char*, int64_t> mixed5[] = {
      {"Mixed_5b", 32}, {"Mixed_5c", 64}, {"Mixed_5d", 64}};
  for (const auto& [name, pool_features] : mixed5) {
    auto s = b.NameScope(name);
    x = InceptionA(b, x, pool_features);
  }
  {
    auto s = b.NameScope("Mixed_6a");
    x = InceptionB(b, x);  // 17x17x768
  }
  const std::pair<const char*, int64_t> mixed6[] = {
      {"Mixed_6b", 128}, {"Mixed_6c", 160}, {"Mixed_6d", 160}, {"Mixed_6e", 192}};
  for (const auto& [name, c7] : mixed6) {
    auto s = b.NameScope(name);
    x = InceptionC(b, x, c7);
  }
  {
    auto s = b.NameScope("Mixed_7a");
    x = InceptionD(b, x);  // 8x8x1280
  }
  for (const char* name : {"Mixed_7b", "Mixed_7c"}) {
    auto s = b.NameScope(name);
    x = InceptionE(b, x);  // 8x8x2048
  }
  x = b.Dropout(b.Flatten(b.GlobalAveragePool(x)), 0.5);
  b.MarkOutput(b.Linear(x, kImageNetClasses));
  return std::move(b).Build();
}

}  // namespace braid::graph::zoo_internal
