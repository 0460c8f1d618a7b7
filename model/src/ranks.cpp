/// @file ranks.cpp
/// @brief Chapter 10's ranks in the model (model.hpp): a call run on every rank, each on its own
/// host thread and device, and the all-reduce of a rank's partial sums.
#include "pd/model/model.hpp"

#include "pd/model/rank_group.hpp"

#include <cstddef>
#include <exception>
#include <functional>

namespace pd::model {

void Model::on_every_rank(const std::function<void(Model&)>& f) {
    if (!group_) return f(*this);
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)
        group_->post(i, [&f, k = group_->ranks[i].get()] { f(*k->model); });
    std::exception_ptr error;
    try {
        f(*this);
    } catch (...) {
        error = std::current_exception();
    }
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)
        if (std::exception_ptr e = group_->wait(i); e && !error) error = e;
    if (error) std::rethrow_exception(error);
}

void Model::all_reduce(float* data, std::size_t count) {
    if (options_.tensor_parallel == 1) return;
    options_.collectives->all_reduce_sum(options_.tp_rank, data, count);
    ++communication_.calls;
    communication_.bytes += double(count) * sizeof(float);
}

}  // namespace pd::model
