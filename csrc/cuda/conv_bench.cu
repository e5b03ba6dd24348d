#include "cuda/conv_bench.h"

#include "cuda/check.h"
#include "cuda/cuda_timer.h"

namespace gdl::cuda {

namespace {
constexpr ConvPass kPasses[] = {ConvPass::fwd, ConvPass::bwd_data, ConvPass::bwd_filter};

std::vector<uint8_t> to_host(const void* src, std::size_t nbytes) {
  std::vector<uint8_t> out(nbytes);
  CUDA_CHECK(cudaMemcpyAsync(out.data(), src, nbytes, cudaMemcpyDeviceToHost, context().stream));
  CUDA_CHECK(cudaStreamSynchronize(context().stream));
  return out;
}
}  // namespace

ConvRig::ConvRig(const LayerSpec& spec) : layer(std::make_unique<ConvLayer>(spec)) {
  const ConvGeometry& g = layer->geometry();
  es = dtype_size(layer->dtype());
  const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.pq();
  w_count = g.k * g.crs();
  const std::size_t np = w_count + (g.bias ? g.k : 0);
  x = std::make_unique<DeviceBuffer>(nx * es);
  y = std::make_unique<DeviceBuffer>(ny * es);
  dy = std::make_unique<DeviceBuffer>(ny * es);
  dx = std::make_unique<DeviceBuffer>(nx * es);
  params = std::make_unique<DeviceBuffer>(np * es);
  grads = std::make_unique<DeviceBuffer>(np * es);
  const auto t = layer->dtype();
  fill(x->data(), nx, t, kConvSeedX);
  fill(dy->data(), ny, t, kConvSeedDy);
  fill(dx->data(), nx, t, kConvSeedDx0);
  fill(params->data(), w_count, t, kConvSeedW);
  if (g.bias) fill(static_cast<char*>(params->data()) + w_count * es, g.k, t, kConvSeedB);
  // On the layer's stream: a plain cudaMemset runs on the legacy stream, which a non-blocking
  // stream does not wait for.
  CUDA_CHECK(cudaMemsetAsync(grads->data(), 0, np * es, context().stream));
  CUDA_CHECK(cudaStreamSynchronize(context().stream));
  layer->bind_params(params->data(), grads->data(), es);
}

void ConvRig::run(ConvPass p) {
  const std::vector<const void*> xs{x->data()};
  switch (p) {
    case ConvPass::fwd: layer->forward(xs, y->data()); break;
    case ConvPass::bwd_data: layer->backward_data(xs, y->data(), dy->data(), {dx->data()}); break;
    case ConvPass::bwd_filter: layer->backward_params(xs, y->data(), dy->data()); break;
  }
}

std::vector<ConvTiming> conv_time(const LayerSpec& spec, const std::vector<ConvPass>& passes, bool all_algos,
                                  const TimingPlan& plan) {
  validate(plan);
  ConvRig rig(spec);
  const cudaStream_t stream = context().stream;
  auto row = [&](ConvPass p, int a, std::vector<double> samples, std::string status) {
    return ConvTiming{p, conv_algo_name(p, a), a, rig.layer->workspace_bytes(p), rig.layer->selection(),
                      std::move(samples), std::move(status)};
  };
  std::vector<ConvTiming> out;
  for (ConvPass p : passes) {
    const int chosen = rig.layer->algo(p);
    if (!all_algos) {
      out.push_back(row(p, chosen, time_events(plan, stream, [&] { rig.run(p); }), "ok"));
      continue;
    }
    for (int a = 0; a < conv_algo_count(p); ++a) {
      const ConvAlgoQuery q = rig.layer->query(p, a);
      std::string status = "ok";
      std::vector<double> samples;
      if (!q.supported) {
        status = "not supported: " + q.status;
      } else if (q.workspace > rig.layer->workspace_limit()) {
        status = concat("needs ", q.workspace, " bytes of workspace > limit ", rig.layer->workspace_limit());
      } else {
        try {
          rig.layer->set_algo(p, a);
          samples = time_events(plan, stream, [&] { rig.run(p); });
        } catch (const std::exception& e) {  // cuDNN refused at run time: record, go on
          status = std::string("failed: ") + e.what();
          samples.clear();
          cudaGetLastError();
        }
      }
      ConvTiming r = row(p, a, std::move(samples), std::move(status));
      r.workspace_bytes = q.workspace;
      out.push_back(std::move(r));
    }
    rig.layer->set_algo(p, chosen);
  }
  return out;
}

ConvCheckRun conv_check(const LayerSpec& spec) {
  ConvRig rig(spec);
  for (ConvPass p : kPasses) rig.run(p);
  CUDA_CHECK(cudaStreamSynchronize(context().stream));
  const ConvGeometry& geom = rig.layer->geometry();
  ConvCheckRun run;
  run.y = to_host(rig.y->data(), rig.y->nbytes());
  run.dx = to_host(rig.dx->data(), rig.dx->nbytes());
  run.dw = to_host(rig.grads->data(), rig.w_count * rig.es);
  if (geom.bias) run.db = to_host(static_cast<char*>(rig.grads->data()) + rig.w_count * rig.es, geom.k * rig.es);
  for (ConvPass p : kPasses) run.algos[conv_pass_name(p)] = conv_algo_name(p, rig.layer->algo(p));
  return run;
}

}  // namespace gdl::cuda
