// hai-demo-train: a small data-parallel training job for HAI-Platform's demo and tests.
//
// Every rank fits the same linear model y = w.x to its own shard of synthetic data; gradients
// are averaged across ranks with HFReduce each step (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// and HFREDUCE_NODE_ID come from hai-agent). The model is checkpointed to $HAI_CHECKPOINT_DIR
// after every epoch, and the job follows the suspend protocol (platform/include/platform/
// hai_job.h): when any rank is asked to suspend, all agree at the end of the epoch, rank 0 saves
// the checkpoint, and every rank exits; the resumed job continues from that epoch.
//
//   hai-demo-train [EPOCHS=20] [SECONDS_PER_EPOCH=0.2]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hfreduce/communicator.h"
#include "platform/hai_job.h"

namespace {

constexpr int kDim = 8;
constexpr int kSamplesPerRank = 256;

int Fail(const std::string& what) {
  std::fprintf(stderr, "hai-demo-train: %s\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ff::hfreduce;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 20;
  const double epoch_seconds = argc > 2 ? std::atof(argv[2]) : 0.2;
  hai::job::InstallSuspendHandler();

  auto options = CommunicatorOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status().message());
  auto comm = Communicator::Create(*options);
  if (!comm.ok()) return Fail(comm.status().message());
  const int rank = (*comm)->rank(), world = (*comm)->world_size();

  // This rank's shard: y = true_w . x + noise, with true_w = (1, 2, ..., kDim).
  std::mt19937 rng(1000 + rank);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(kSamplesPerRank * kDim), y(kSamplesPerRank);
  for (int s = 0; s < kSamplesPerRank; ++s) {
    float dot = 0;
    for (int d = 0; d < kDim; ++d) {
      x[s * kDim + d] = normal(rng);
      dot += static_cast<float>(d + 1) * x[s * kDim + d];
    }
    y[s] = dot + 0.01f * normal(rng);
  }

  // Resume from the checkpoint: epoch, then the weights.
  const std::string ckpt = hai::job::CheckpointDir() + "/model.txt";
  std::vector<float> w(kDim, 0.0f);
  int start = 0;
  if (std::ifstream in(ckpt); in) {
    in >> start;
    for (float& v : w)
      in >> v;
    if (!in) return Fail("unreadable checkpoint " + ckpt);
  }
  if (rank == 0) {
    std::printf("rank 0 of %d: starting at epoch %d (restart %d)\n", world, start,
                hai::job::RestartCount());
    std::fflush(stdout);
  }

  hai::job::StepRecorder steps;  // each epoch a step, for hai top (platform/hai_job.h)
  for (int epoch = start; epoch < epochs; ++epoch) {
    // One full-batch gradient step on the mean squared error, averaged over ranks.
    std::vector<float> grad(kDim + 1, 0.0f);  // last element: this rank's loss
    for (int s = 0; s < kSamplesPerRank; ++s) {
      float err = -y[s];
      for (int d = 0; d < kDim; ++d)
        err += w[d] * x[s * kDim + d];
      for (int d = 0; d < kDim; ++d)
        grad[d] += 2 * err * x[s * kDim + d] / kSamplesPerRank;
      grad[kDim] += err * err / kSamplesPerRank;
    }
    ff::Status st;
    {
      auto timed = steps.Time(hai::job::Phase::kComm);
      st = (*comm)->Allreduce(grad.data(), grad.data(), grad.size(), DataType::kFloat32,
                              ReduceOp::kAvg);
    }
    if (!st.ok()) return Fail("allreduce: " + st.message());
    for (int d = 0; d < kDim; ++d)
      w[d] -= 0.1f * grad[d];
    std::this_thread::sleep_for(std::chrono::duration<double>(epoch_seconds));

    // Suspend together: any rank asked makes every rank stop after this epoch.
    int32_t asked = hai::job::ShouldSuspend() ? 1 : 0;
    {
      auto timed = steps.Time(hai::job::Phase::kComm);
      st = (*comm)->Allreduce(&asked, &asked, 1, DataType::kInt32, ReduceOp::kMax);
    }
    if (!st.ok()) return Fail("allreduce: " + st.message());
    if (rank == 0) {
      std::string tmp = ckpt + ".tmp";
      {
        std::ofstream out(tmp, std::ios::trunc);
        out << epoch + 1;
        for (float v : w)
          out << " " << v;
        out << "\n";
      }
      std::rename(tmp.c_str(), ckpt.c_str());
      std::printf("epoch %d: loss %.6f\n", epoch + 1, grad[kDim]);
      std::fflush(stdout);
      if (!hai::job::Report(epoch + 1, {{"loss", grad[kDim]}})) {
        std::fprintf(stderr, "hai-demo-train: could not report epoch %d's loss\n", epoch + 1);
      }
    }
    if (!steps.Done(epoch + 1)) {
      std::fprintf(stderr, "hai-demo-train: could not record epoch %d's step\n", epoch + 1);
    }
    if (asked) {
      if (rank == 0) std::printf("checkpointed after epoch %d; suspending\n", epoch + 1);
      (void)(*comm)->Barrier();
      hai::job::SuspendNow();
    }
  }
  if (rank == 0) {
    std::printf("trained w =");
    for (float v : w)
      std::printf(" %.3f", v);
    std::printf("\n");
  }
  return 0;
}
