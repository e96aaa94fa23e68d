// Vision models of the zoo, layer for layer as torchvision defines them, so
// their parameter counts equal torchvision's (VGG19 143,667,240; ResNet-50
// 25,557,032; ResNeXt-50 32x4d 25,028,904; Inception-v3 23,834,568 without the
// auxiliary classifier). torchvision's AdaptiveAvgPool2d((7, 7)) in VGG is the
// identity at 224x224 input and is left out. Every builder takes ZooDims: the
// image size, a divisor of every channel count and the classes (the published
// ones at ZooSize::kPublished); the layers are the same at every size.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/builder.h"
#include "graph/internal/zoo.h"

namespace braid::graph::zoo_internal {
namespace {

// torchvision VGG19 ("E" config): 16 convs with bias + ReLU, 5 max pools, and a
// 3-layer classifier with dropout 0.5.
TensorId Vgg19Body(GraphBuilder& b, TensorId x, const ZooDims& dims) {
  const std::vector<int64_t> cfg = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                    512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
  {
    auto s = b.NameScope("features");
    for (int64_t c : cfg) {
      x = c == 0 ? b.MaxPool(x, 2, 2) : b.Relu(b.Conv(x, c / dims.channel_div, 3, 1, 1));
    }
  }
  auto s = b.NameScope("classifier");
  x = b.Flatten(x);  // [N, 512*7*7] at 224x224
  x = b.Dropout(b.Relu(b.Linear(x, dims.fc)), 0.5);
  x = b.Dropout(b.Relu(b.Linear(x, dims.fc)), 0.5);
  return b.Linear(x, dims.classes);
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

// At a channel divisor the stem and every stage's planes shrink by it; the
// bottleneck width keeps torchvision's formula (so ResNeXt keeps 32 groups,
// which needs channel_div <= 4: a width of at least one channel per group).
absl::StatusOr<Graph> BuildResNetFamily(std::string name, int64_t batch, const ZooDims& dims,
                                        int64_t groups, int64_t width_per_group) {
  GraphBuilder b(std::move(name));
  const int64_t base = 64 / dims.channel_div;
  TensorId x = b.Input("image", {batch, 3, dims.image, dims.image});
  x = b.MaxPool(b.Relu(ConvBn(b, x, base, 7, 2, 3)), 3, 2, 1);
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = base << stage;
    for (int64_t i = 0; i < blocks[stage]; ++i) {
      auto s = b.NameScope(absl::StrCat("layer", stage + 1, ".", i));
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      x = Bottleneck(b, x, planes, stride, groups, width_per_group);
    }
  }
  x = b.Linear(b.Flatten(b.GlobalAveragePool(x)), dims.classes);
  b.MarkOutput(x);
  return std::move(b).Build();
}

// torchvision BasicConv2d: conv without bias, BatchNorm (eps 0.001), ReLU.
// `cout` is the published channel count; the conv has cout / div.
TensorId Basic(GraphBuilder& b, int64_t div, TensorId x, int64_t cout, std::vector<int64_t> kernel,
               std::vector<int64_t> pad = {0, 0}, int64_t stride = 1) {
  ConvSpec spec;
  spec.out_channels = cout / div;
  spec.kernel_shape = std::move(kernel);
  spec.strides = {stride, stride};
  spec.pads = {pad[0], pad[1], pad[0], pad[1]};
  spec.bias = false;
  return b.Relu(b.BatchNorm(b.Conv(x, spec), 1e-3));
}

TensorId AvgPoolBranch(GraphBuilder& b, int64_t div, TensorId x, int64_t cout) {
  return Basic(b, div, b.AveragePool(x, 3, 1, 1), cout, {1, 1});
}

TensorId InceptionA(GraphBuilder& b, int64_t div, TensorId x, int64_t pool_features) {
  TensorId b1 = Basic(b, div, x, 64, {1, 1});
  TensorId b5 = Basic(b, div, Basic(b, div, x, 48, {1, 1}), 64, {5, 5}, {2, 2});
  TensorId b3 = Basic(b, div, x, 64, {1, 1});
  b3 = Basic(b, div, Basic(b, div, b3, 96, {3, 3}, {1, 1}), 96, {3, 3}, {1, 1});
  return b.Concat({b1, b5, b3, AvgPoolBranch(b, div, x, pool_features)}, 1);
}

TensorId InceptionB(GraphBuilder& b, int64_t div, TensorId x) {
  TensorId b3 = Basic(b, div, x, 384, {3, 3}, {0, 0}, 2);
  TensorId bd = Basic(b, div, Basic(b, div, x, 64, {1, 1}), 96, {3, 3}, {1, 1});
  bd = Basic(b, div, bd, 96, {3, 3}, {0, 0}, 2);
  return b.Concat({b3, bd, b.MaxPool(x, 3, 2)}, 1);
}

TensorId InceptionC(GraphBuilder& b, int64_t div, TensorId x, int64_t c7) {
  TensorId b1 = Basic(b, div, x, 192, {1, 1});
  TensorId b7 = Basic(b, div, x, c7, {1, 1});
  b7 = Basic(b, div, Basic(b, div, b7, c7, {1, 7}, {0, 3}), 192, {7, 1}, {3, 0});
  TensorId bd = Basic(b, div, x, c7, {1, 1});
  bd = Basic(b, div, Basic(b, div, bd, c7, {7, 1}, {3, 0}), c7, {1, 7}, {0, 3});
  bd = Basic(b, div, Basic(b, div, bd, c7, {7, 1}, {3, 0}), 192, {1, 7}, {0, 3});
  return b.Concat({b1, b7, bd, AvgPoolBranch(b, div, x, 192)}, 1);
}

TensorId InceptionD(GraphBuilder& b, int64_t div, TensorId x) {
  TensorId b3 = Basic(b, div, Basic(b, div, x, 192, {1, 1}), 320, {3, 3}, {0, 0}, 2);
  TensorId b7 = Basic(b, div, x, 192, {1, 1});
  b7 = Basic(b, div, Basic(b, div, b7, 192, {1, 7}, {0, 3}), 192, {7, 1}, {3, 0});
  b7 = Basic(b, div, b7, 192, {3, 3}, {0, 0}, 2);
  return b.Concat({b3, b7, b.MaxPool(x, 3, 2)}, 1);
}

TensorId InceptionE(GraphBuilder& b, int64_t div, TensorId x) {
  TensorId b1 = Basic(b, div, x, 320, {1, 1});
  TensorId b3 = Basic(b, div, x, 384, {1, 1});
  b3 =
      b.Concat({Basic(b, div, b3, 384, {1, 3}, {0, 1}), Basic(b, div, b3, 384, {3, 1}, {1, 0})}, 1);
  TensorId bd = Basic(b, div, Basic(b, div, x, 448, {1, 1}), 384, {3, 3}, {1, 1});
  bd =
      b.Concat({Basic(b, div, bd, 384, {1, 3}, {0, 1}), Basic(b, div, bd, 384, {3, 1}, {1, 0})}, 1);
  return b.Concat({b1, b3, bd, AvgPoolBranch(b, div, x, 192)}, 1);
}

}  // namespace

absl::StatusOr<Graph> BuildVgg19(int64_t batch, const ZooDims& dims) {
  GraphBuilder b("vgg19");
  TensorId x = b.Input("image", {batch, 3, dims.image, dims.image});
  b.MarkOutput(Vgg19Body(b, x, dims));
  return std::move(b).Build();
}

absl::StatusOr<Graph> BuildResNet50(int64_t batch, const ZooDims& dims) {
  return BuildResNetFamily("resnet50", batch, dims, /*groups=*/1, /*width_per_group=*/64);
}

absl::StatusOr<Graph> BuildResNeXt50(int64_t batch, const ZooDims& dims) {
  return BuildResNetFamily("resnext50", batch, dims, /*groups=*/32, /*width_per_group=*/4);
}

// torchvision inception_v3(aux_logits=False, transform_input=False) at 299x299.
// The auxiliary classifier (3,326,696 parameters, 27,161,264 in all) is left
// out: it is a second logits output that only the training loss consumes.
// The spatial sizes in the comments are at 299; 75 is the smallest input every
// layer accepts (37, 35, 35, 17, 17, 15, 7; Mixed_6 at 3x3, Mixed_7 at 1x1).
absl::StatusOr<Graph> BuildInceptionV3(int64_t batch, const ZooDims& dims) {
  const int64_t div = dims.channel_div;
  GraphBuilder b("inception_v3");
  TensorId x = b.Input("image", {batch, 3, dims.image, dims.image});
  {
    auto s = b.NameScope("stem");
    x = Basic(b, div, x, 32, {3, 3}, {0, 0}, 2);         // 149
    x = Basic(b, div, x, 32, {3, 3});                    // 147
    x = Basic(b, div, x, 64, {3, 3}, {1, 1});            // 147
    x = b.MaxPool(x, 3, 2);                              // 73
    x = Basic(b, div, x, 80, {1, 1});                    // 73
    x = b.MaxPool(Basic(b, div, x, 192, {3, 3}), 3, 2);  // 71 -> 35
  }
  const std::pair<const char*, int64_t> mixed5[] = {
      {"Mixed_5b", 32}, {"Mixed_5c", 64}, {"Mixed_5d", 64}};
  for (const auto& [name, pool_features] : mixed5) {
    auto s = b.NameScope(name);
    x = InceptionA(b, div, x, pool_features);
  }
  {
    auto s = b.NameScope("Mixed_6a");
    x = InceptionB(b, div, x);  // 17x17x768
  }
  const std::pair<const char*, int64_t> mixed6[] = {
      {"Mixed_6b", 128}, {"Mixed_6c", 160}, {"Mixed_6d", 160}, {"Mixed_6e", 192}};
  for (const auto& [name, c7] : mixed6) {
    auto s = b.NameScope(name);
    x = InceptionC(b, div, x, c7);
  }
  {
    auto s = b.NameScope("Mixed_7a");
    x = InceptionD(b, div, x);  // 8x8x1280
  }
  for (const char* name : {"Mixed_7b", "Mixed_7c"}) {
    auto s = b.NameScope(name);
    x = InceptionE(b, div, x);  // 8x8x2048
  }
  x = b.Dropout(b.Flatten(b.GlobalAveragePool(x)), 0.5);
  b.MarkOutput(b.Linear(x, dims.classes));
  return std::move(b).Build();
}

}  // namespace braid::graph::zoo_internal
