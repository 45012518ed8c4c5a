"""The shop's one model: an order, whose confirmation mail is a ket job."""

from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=20)
    status = models.CharField(max_length=20, default="new")
