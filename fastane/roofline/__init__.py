"""fastane.roofline"""
