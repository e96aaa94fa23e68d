// The fused-op estimator provider of the programs that link the GNN
// (braid-torch, braid-server): installed once in main(), it gives every cost
// model of a cluster whose device kind has a trained checkpoint
// (costmodel::GnnCheckpointPathFor) the GnnEstimator of that checkpoint,
// loaded once per (cluster, checkpoint, profile store) and shared by every
// search; its prediction cache lives in the profile store's SQLite file.
//
//   int main() { braid::costmodel::gnn::InstallGnnEstimatorProvider(); ... }
#ifndef BRAID_COSTMODEL_GNN_PROVIDER_H_
#define BRAID_COSTMODEL_GNN_PROVIDER_H_

namespace braid::costmodel::gnn {

// A checkpoint that cannot be loaded (another device kind or feature schema,
// a damaged file) is reported once in the log and the cost model keeps the
// corrected roofline: planning never fails because of the estimator.
void InstallGnnEstimatorProvider();

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_PROVIDER_H_
