"""The formulas beside the network: the loss (loss), the learning-rate schedules
(lr_schedule), evaluation metrics (metrics), numeric precision (precision)."""
