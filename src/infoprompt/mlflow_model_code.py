"""The code MLflow copies into an adapter's model and runs to build it (MLflow's "models from code"): the model
is :class:`infoprompt.mlflow_model.AdapterModel`, which reads the adapter logged beside this file when MLflow
loads it, so no pickled object is stored. Not imported by the library."""

import mlflow.models

from infoprompt.mlflow_model import AdapterModel

mlflow.models.set_model(AdapterModel())
